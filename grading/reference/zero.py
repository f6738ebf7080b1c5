"""ZeRO stages 1 and 2 for AdamW as a ``torch.optim.Optimizer`` (Rajbhandari et al., "ZeRO",
arXiv:1910.02054; picotron).

The N trainable parameters of each parameter group are flattened into one vector and cut into d
contiguous shards, one per rank of the data-parallel group (the first N mod d shards one element
longer):

    flat parameters  [ shard 0 | shard 1 | ... | shard d-1 ]      rank r updates shard r only

    DDP:      all-reduce the gradients; every rank keeps AdamW's m and v for all N     (K N bytes of state)
    stage 1:  all-reduce the gradients; rank r keeps m and v for its shard only, updates its
              shard of the parameters, then all-gathers the updated shards            (K N / d)
    stage 2:  reduce-scatter the gradients instead: rank r receives only the mean gradient of
              its shard (gradient memory / d too); same update and all-gather          (2 N: same volume as DDP)

All-gather and reduce-scatter need equal pieces: each shard travels in a slot the size of
the longest shard (``shard_slots``), and the padding is dropped on arrival (``unslot``).
AdamW is ``torch.optim.AdamW``'s (Loshchilov and Hutter, arXiv:1711.05101: weight decay
decoupled from the gradient; Kingma and Ba, arXiv:1412.6980):

    p <- p (1 - lr wd)
    m <- b1 m + (1 - b1) g          v <- b2 v + (1 - b2) g^2
    p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

torch computes sqrt(v) / sqrt(1 - b2^t) and m by ``lerp_``: the same maths, equal to float32 rounding.
A checkpoint of these optimizers (``state_dict``) holds this rank's shard of m and v only, with
the shard's range and d: restoring it needs every rank's file, the same d and the same parameters.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist


def flat_shard_range(numel: int, world_size: int, rank: int) -> tuple:
    """(start, stop) of rank's shard of a flat vector of ``numel`` elements (torch.tensor_split's)."""
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def adamw_update_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                  step: int, lr: float, betas: tuple, eps: float, weight_decay: float) -> None:
    """One AdamW step (step = 1, 2, ...), in place on ``param``, ``exp_avg`` (m) and ``exp_avg_sq`` (v);
    the weight decay is decoupled: it shrinks ``param`` and never enters m or v."""
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denominator = (exp_avg_sq / (1 - beta2**step)).sqrt_().add_(eps)
    param.addcdiv_(exp_avg, denominator, value=-lr / (1 - beta1**step))


def shard_slots(flat: torch.Tensor, world_size: int) -> torch.Tensor:
    """(world_size, longest shard) rows: row r holds rank r's shard of ``flat``, then zero padding."""
    slot = math.ceil(flat.numel() / world_size)
    slots = flat.new_zeros(world_size, slot)
    for rank in range(world_size):
        start, stop = flat_shard_range(flat.numel(), world_size, rank)
        slots[rank, :stop - start] = flat[start:stop]
    return slots


def unslot(slots: torch.Tensor, numel: int) -> torch.Tensor:
    """The flat vector of ``numel`` elements whose shards fill the rows of ``slots`` (padding dropped)."""
    world_size = slots.shape[0]
    return torch.cat([slots[r, :stop - start] for r, (start, stop) in
                      enumerate(flat_shard_range(numel, world_size, r) for r in range(world_size))])


class ZeroStage1AdamW(torch.optim.Optimizer):
    """AdamW whose state (m, v) is sharded over ``group`` (default: every rank); gradients are
    all-reduced whole. Each parameter group (its own lr, betas, eps, weight_decay) is one flat
    vector, sharded on its own; ``self.state["shard of group i"]`` holds its ``step``,
    ``exp_avg`` and ``exp_avg_sq`` (flat, this rank's shard). Parameters with
    ``requires_grad=False`` when their group is added are left out (frozen layers); a trainable
    parameter without a gradient at a step counts as a zero gradient."""

    def __init__(self, params, group=None, lr: float = 1e-3, betas: tuple = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        self.group = group if group is not None else dist.group.WORLD
        self.world_size, self.rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (``torch.optim.Optimizer``'s checks and defaults, called unwrapped: its wrapper
        imports torch's compiler, seconds on every rank), and this rank's shard of its state."""
        torch.optim.Optimizer.add_param_group.__wrapped__(self, param_group)
        index = len(self.param_groups) - 1
        self.state[f"shard of group {index}"] = self.new_shard_state(index)

    def new_shard_state(self, index: int) -> dict:
        """Group ``index``'s step and zero m and v for this rank's shard of its flat trainable values."""
        _, start, stop = self._range(index)
        like = (self._trainable(index) or self.param_groups[index]["params"])[0]
        exp_avg = torch.zeros(stop - start, dtype=like.dtype, device=like.device)
        return {"step": 0, "exp_avg": exp_avg, "exp_avg_sq": torch.zeros_like(exp_avg)}

    def _trainable(self, index: int) -> list:
        return [p for p in self.param_groups[index]["params"] if p.requires_grad]

    def _range(self, index: int) -> tuple:
        numel = sum(p.numel() for p in self._trainable(index))
        return (numel, *flat_shard_range(numel, self.world_size, self.rank))

    def _flat_gradients(self, index: int) -> torch.Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self._trainable(index)])

    def mean_gradient_shard(self, index: int) -> torch.Tensor:
        """Stage 1: all-reduce group ``index``'s flat gradient, keep this rank's shard of the mean."""
        _, start, stop = self._range(index)
        flat = self._flat_gradients(index)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.group)
        return flat[start:stop] / self.world_size

    def _all_gather_parameters(self, index: int, shard: torch.Tensor) -> None:
        """Every rank gets every updated shard of group ``index``, written back into the parameters."""
        numel = self._range(index)[0]
        slot = math.ceil(numel / self.world_size)
        mine = shard.new_zeros(slot)
        mine[:shard.numel()] = shard
        gathered = shard.new_empty(slot * self.world_size)
        dist.all_gather_into_tensor(gathered, mine, group=self.group)
        flat, offset = unslot(gathered.view(self.world_size, slot), numel), 0
        for param in self._trainable(index):
            param.copy_(flat[offset:offset + param.numel()].view_as(param))
            offset += param.numel()

    @torch.no_grad()
    def step(self, closure=None):
        """One AdamW step of every group on this rank's shard, then the all-gather of its parameters."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for index, hyper in enumerate(self.param_groups):
            if not self._trainable(index):
                continue
            state = self.state[f"shard of group {index}"]
            state["step"] += 1
            _, start, stop = self._range(index)
            grad_shard = self.mean_gradient_shard(index)
            param_shard = torch.cat([p.reshape(-1) for p in self._trainable(index)])[start:stop].clone()
            adamw_update_(param_shard, grad_shard, state["exp_avg"], state["exp_avg_sq"], state["step"],
                          hyper["lr"], hyper["betas"], hyper["eps"], hyper["weight_decay"])
            self._all_gather_parameters(index, param_shard)
        return loss

    def _shard_description(self) -> dict:
        return {"rank": self.rank, "world_size": self.world_size,
                "ranges": [self._range(i) for i in range(len(self.param_groups))]}

    def state_dict(self) -> dict:
        """A copy of what this rank holds: each group's shard state (step, m, v), its hyperparameters,
        and which shard it is (rank, d, each group's (numel, start, stop))."""
        return {"state": {key: {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in value.items()}
                          for key, value in self.state.items()},
                "param_groups": [{k: v for k, v in group.items() if k != "params"} for group in self.param_groups],
                "shard": self._shard_description()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a ``state_dict`` saved by the same rank of a group of the same size, same parameters."""
        shard = state_dict.get("shard") or {}
        saved = {**shard, "ranges": [tuple(r) for r in shard.get("ranges", [])]}
        if saved != self._shard_description():
            raise ValueError(f"this checkpoint holds the shard {shard}, this rank needs {self._shard_description()}: "
                             "load each rank's own file, with the same group size and parameters")
        for group, hyper in zip(self.param_groups, state_dict["param_groups"]):
            group.update(hyper)
        for key, value in state_dict["state"].items():
            self.state[key] = {k: v.detach().clone() if torch.is_tensor(v) else v for k, v in value.items()}


class ZeroStage2AdamW(ZeroStage1AdamW):
    """Stage 1, with the gradients reduce-scattered: each rank receives only its shard's mean."""

    def mean_gradient_shard(self, index: int) -> torch.Tensor:
        _, start, stop = self._range(index)
        slots = shard_slots(self._flat_gradients(index), self.world_size)
        shard = slots.new_empty(slots.shape[1])
        dist.reduce_scatter_tensor(shard, slots.reshape(-1), op=dist.ReduceOp.SUM, group=self.group)
        return shard[:stop - start] / self.world_size
