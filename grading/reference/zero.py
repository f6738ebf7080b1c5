"""ZeRO stages 1 and 2 around any ``torch.optim`` optimizer, used like PyTorch's
``ZeroRedundancyOptimizer`` (Rajbhandari et al., "ZeRO", arXiv:1910.02054; picotron).

    optimizer = ZeroStage1(model.parameters(), torch.optim.AdamW, process_group=group, lr=1e-3)

The N trainable parameters of each parameter group are flattened into one vector and cut into d
contiguous shards, one per rank of the data-parallel group (the first N mod d shards one element
longer). Rank r runs ``optimizer_class`` on its shard only: its pieces are views of the
parameters, one per parameter its shard overlaps, so the optimizer's own arithmetic (AdamW,
SGD, amsgrad, maximize, foreach, ...) runs unchanged and keeps state for N/d values:

    flat parameters  [ shard 0 | shard 1 | ... | shard d-1 ]      rank r updates shard r only

    stage 1:  the gradients arrive averaged (DDP's all-reduce, in backward); rank r updates its
              shard, then all-gathers the updated shards                              (state K N / d)
    stage 2:  no DDP: backward hooks reduce-scatter each group's gradients, so rank r receives only
              the mean gradient of its shard (gradient memory / d too); same update and
              all-gather                                                              (2 N: DDP's volume)

Gradients are reduced where torch reduces them, never in ``step()``: anything between backward
and step (clipping, a gradient-norm log) sees reduced gradients, and nothing is reduced twice. A
parameter whose gradient is None (on every rank) is skipped by the optimizer, as torch skips it.
All-gather and reduce-scatter need equal pieces: each shard travels in a slot the size of the
longest shard (``shard_slots``), and the padding is dropped on arrival (``unslot``).

``adamw_update_`` is ``torch.optim.AdamW``'s default (single-tensor) arithmetic, in torch's order
(Loshchilov and Hutter, arXiv:1711.05101; Kingma and Ba, arXiv:1412.6980), bit-identical in float32:

    p <- p (1 - lr wd)
    m <- lerp(m, g, 1 - b1)          v <- b2 v + (1 - b2) g^2
    p <- p - (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)

A checkpoint is torch's: ``consolidate_state_dict(to=r)`` on every rank, then ``state_dict()``
on rank r is the state dict ``optimizer_class`` would have on the unsharded model;
``load_state_dict`` takes that dict on every rank and keeps each rank's shard.
"""
from __future__ import annotations

import math
import weakref

import torch
import torch.distributed as dist


def flat_shard_range(numel: int, world_size: int, rank: int) -> tuple:
    """(start, stop) of rank's shard of a flat vector of ``numel`` elements (torch.tensor_split's)."""
    base, extra = divmod(numel, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def adamw_update_(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                  step: int, lr: float, betas: tuple, eps: float, weight_decay: float) -> None:
    """One AdamW step (step = 1, 2, ...), in place on ``param``, ``exp_avg`` (m) and ``exp_avg_sq`` (v),
    in ``torch.optim.AdamW``'s order (its single-tensor path); the weight decay is decoupled."""
    beta1, beta2 = betas
    param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step_size = lr / (1 - beta1**step)
    denominator = (exp_avg_sq.sqrt() / (1 - beta2**step) ** 0.5).add_(eps)
    param.addcdiv_(exp_avg, denominator, value=-step_size)


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


def all_gather_shards(shard: torch.Tensor, numel: int, group) -> torch.Tensor:
    """The flat vector of ``numel`` elements, all-gathered from every rank's ``shard`` (in slots,
    with ``dist.all_gather_single``, what torch 2.13 calls ``all_gather_into_tensor``)."""
    world_size = dist.get_world_size(group)
    slot = math.ceil(numel / world_size)
    mine = shard.new_zeros(slot)
    mine[:shard.numel()] = shard
    gathered = shard.new_empty(slot * world_size)
    dist.all_gather_single(gathered, mine, group=group)
    return unslot(gathered.view(world_size, slot), numel)


def shard_pieces(params: list, world_size: int, rank: int) -> list:
    """(param, lo, hi) for each parameter the rank's shard of their flat concatenation overlaps:
    elements lo:hi of the flattened ``param``."""
    start, stop = flat_shard_range(sum(p.numel() for p in params), world_size, rank)
    pieces, offset = [], 0
    for param in params:
        lo, hi = max(start, offset) - offset, min(stop, offset + param.numel()) - offset
        if lo < hi:
            if not param.is_contiguous():
                raise ValueError(f"a parameter of shape {tuple(param.shape)} is not contiguous: ZeRO needs views of it")
            pieces.append((param, lo, hi))
        offset += param.numel()
    return pieces


def assemble_state_dict(optimizer, pieces: list) -> dict:
    """torch's state dict of the unsharded optimizer from every rank's (group, position, lo, hi,
    state) pieces of ``optimizer``'s state: per-element tensors (1-D, the piece's length) laid into
    whole tensors of the parameter's shape, the rest (step) as is."""
    numbers, state, groups = {}, {}, []
    for index, group in enumerate(optimizer.param_groups):
        ids = list(range(len(numbers), len(numbers) + len(group["params"])))
        numbers.update({(index, position): i for position, i in enumerate(ids)})
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": ids})
    for index, position, lo, hi, values in sorted(pieces, key=lambda piece: piece[:3]):
        param, entry = optimizer.param_groups[index]["params"][position], state.setdefault(numbers[index, position], {})
        for key, value in values.items():
            if torch.is_tensor(value) and value.dim() > 0:  # per element: this piece's slice
                whole = entry.setdefault(key, value.new_zeros(param.shape))
                whole.view(-1)[lo:hi] = value
            else:
                entry.setdefault(key, value)
    return {"state": state, "param_groups": groups}


class ZeroStage1(torch.optim.Optimizer):
    """``optimizer_class`` with its state sharded over ``process_group`` (default: every rank); the
    gradients must arrive averaged over the group (``DataParallel``, DDP). Each parameter group is
    one flat vector, sharded on its own; ``self.optim`` is the rank's local ``optimizer_class`` over
    its pieces (views of the parameters), its groups kept in step with ``self.param_groups`` (an LR
    scheduler works on this optimizer). Parameters with ``requires_grad=False`` when their group
    is added are left out (frozen layers)."""

    def __init__(self, params, optimizer_class=torch.optim.AdamW, *, process_group=None, **defaults):
        self.process_group = process_group if process_group is not None else dist.group.WORLD
        self.world_size, self.rank = dist.get_world_size(self.process_group), dist.get_rank(self.process_group)
        self.optimizer_class, self.optim, self.pieces, self.consolidated = optimizer_class, None, [], None
        super().__init__(params, defaults)
        self.optim = optimizer_class([self.local_group(i) for i in range(len(self.param_groups))], **defaults)
        for group, local in zip(self.param_groups, self.optim.param_groups):
            group.update({k: v for k, v in local.items() if k != "params" and k not in group})

    def add_param_group(self, param_group: dict) -> None:
        """Add a group (``torch.optim.Optimizer``'s checks and defaults, called unwrapped: its wrapper
        imports torch's compiler, seconds on every rank) and this rank's pieces of it."""
        torch.optim.Optimizer.add_param_group.__wrapped__(self, param_group)
        index = len(self.param_groups) - 1
        self.pieces.append([(*piece, piece[0].detach().view(-1)[piece[1]:piece[2]])
                            for piece in shard_pieces(self.trainable(index), self.world_size, self.rank)])
        if self.optim is not None:
            self.optim.add_param_group(self.local_group(index))

    def local_group(self, index: int) -> dict:
        hyper = {k: v for k, v in self.param_groups[index].items() if k != "params"}
        return {**hyper, "params": [view for *_, view in self.pieces[index]]}

    def trainable(self, index: int) -> list:
        """The parameters of group ``index`` that are trained (frozen ones left out)."""
        return [p for p in self.param_groups[index]["params"] if p.requires_grad]

    def collect_gradients(self) -> None:
        """Stage 1: each piece's gradient is its slice of the parameter's (already averaged) ``.grad``."""
        for pieces in self.pieces:
            for param, lo, hi, view in pieces:
                view.grad = None if param.grad is None else param.grad.detach().reshape(-1)[lo:hi]

    @torch.no_grad()
    def step(self, closure=None):
        """The local optimizer's step on this rank's shard, then each group's all-gather."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group, local in zip(self.param_groups, self.optim.param_groups):
            local.update({k: v for k, v in group.items() if k != "params"})
        self.collect_gradients()
        self.optim.step()
        for index in range(len(self.param_groups)):
            self.all_gather_group(index)
        return loss

    def all_gather_group(self, index: int) -> None:
        """Every rank gets every updated shard of group ``index``, written back into the parameters."""
        trainable = self.trainable(index)
        if not trainable:
            return
        mine = [view for *_, view in self.pieces[index]]
        shard = torch.cat(mine) if mine else trainable[0].detach().new_empty(0)
        flat, offset = all_gather_shards(shard, sum(p.numel() for p in trainable), self.process_group), 0
        for param in trainable:
            param.copy_(flat[offset:offset + param.numel()].view_as(param))
            offset += param.numel()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the parameters' gradients and this rank's pieces' (what stage 2 reduced)."""
        for group, pieces in zip(self.param_groups, self.pieces):
            for param in group["params"]:
                if param.grad is not None:
                    param.grad = None if set_to_none else param.grad.detach().zero_()
            for *_, view in pieces:
                view.grad = None

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's shard of the local optimizer's state on group rank ``to`` (a
        collective: every rank of the group calls it); ``state_dict()`` there returns the whole."""
        local = self.optim.state_dict()
        positions = [(index, [id(p) for p in self.param_groups[index]["params"]].index(id(param)), lo, hi)
                     for index, pieces in enumerate(self.pieces) for param, lo, hi, _ in pieces]
        mine = [(*where, {k: v.detach().cpu() if torch.is_tensor(v) else v for k, v in local["state"][i].items()})
                for i, where in enumerate(positions) if i in local["state"]]
        gathered = [None] * self.world_size if self.rank == to else None
        dist.gather_object(mine, gathered, dst=dist.get_global_rank(self.process_group, to),
                           group=self.process_group)
        self.consolidated = assemble_state_dict(self, [p for pieces in gathered for p in pieces]) if gathered else None

    def state_dict(self) -> dict:
        """The whole optimizer's state dict, on the rank that ``consolidate_state_dict(to=...)`` named."""
        if self.consolidated is None:
            raise RuntimeError("this rank holds no consolidated state: call consolidate_state_dict(to=rank) on "
                               "every rank first, then state_dict() on that rank")
        return self.consolidated

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a whole optimizer's state dict (``state_dict()``'s, or ``optimizer_class``'s on the
        unsharded model) on every rank: each keeps its pieces' slices."""
        numbers, state, local_groups, count = {}, {}, [], 0
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update({k: v for k, v in saved.items() if k != "params"})
            numbers.update({id(p): n for p, n in zip(group["params"], saved["params"])})
        for index, pieces in enumerate(self.pieces):
            local_groups.append({**{k: v for k, v in self.param_groups[index].items() if k != "params"},
                                 "params": list(range(count, count + len(pieces)))})
            for param, lo, hi, _ in pieces:
                saved = state_dict["state"].get(numbers[id(param)])
                if saved is not None:
                    state[count] = {k: v.reshape(-1)[lo:hi].clone() if torch.is_tensor(v) and v.dim() > 0 else v
                                    for k, v in saved.items()}
                count += 1
        self.optim.load_state_dict({"state": state, "param_groups": local_groups})


def reduce_scatter_mean(flat: torch.Tensor, group, extra: torch.Tensor | None = None) -> tuple:
    """This rank's shard of ``flat`` averaged over ``group`` (each rank's contribution scaled by 1/d
    first, then summed, as DDP does), with ``dist.reduce_scatter_single`` on ``shard_slots``;
    ``extra``, optional, rides in every slot and comes back summed. Returns (shard, extra sum)."""
    world_size = dist.get_world_size(group)
    slots = shard_slots(flat.mul(1 / world_size), world_size)
    if extra is not None:
        slots = torch.cat([slots, extra.to(slots.dtype).expand(world_size, -1)], dim=1)
    mine = slots.new_empty(slots.shape[1])
    dist.reduce_scatter_single(mine, slots.reshape(-1), group=group)
    length = -(-flat.numel() // world_size)
    rank = dist.get_rank(group)
    start, stop = flat_shard_range(flat.numel(), world_size, rank)
    return mine[:stop - start], mine[length:]


class ZeroStage2(ZeroStage1):
    """Stage 1 without DDP: a hook on each trainable parameter counts the gradients as backward
    produces them, and each group, once complete (in group order; the rest when backward ends),
    is reduce-scattered: rank r keeps only its shard's mean gradient, in its pieces' ``.grad``
    (added up over backward passes until ``zero_grad``), and the parameters' full ``.grad`` are
    freed. A parameter that no rank gave a gradient keeps none (the optimizer skips it). The hooks
    go with the optimizer: one rebuilt from a checkpoint replaces the old one's.
    Clip with ``clip_grad_norm_`` (the norm of the whole gradient, from every rank's shard)."""

    def __init__(self, params, optimizer_class=torch.optim.AdamW, *, process_group=None, **defaults):
        super().__init__(params, optimizer_class, process_group=process_group, **defaults)
        self._reset()
        owner = weakref.ref(self)  # the hooks do not keep the optimizer alive, and go with it

        def hook(param: torch.Tensor) -> None:
            optimizer = owner()
            if optimizer is not None:
                optimizer.on_gradient_ready(param)

        handles = [param.register_post_accumulate_grad_hook(hook)
                   for index in range(len(self.param_groups)) for param in self.trainable(index)]
        weakref.finalize(self, lambda: [handle.remove() for handle in handles])

    def _reset(self) -> None:
        self.ready: set = set()  # id() of the parameters whose gradient arrived in this backward
        self.next_group = 0

    def collect_gradients(self) -> None:
        """Stage 2: the pieces' gradients arrived in backward."""

    def on_gradient_ready(self, param: torch.Tensor) -> None:
        if not self.ready:
            torch.autograd.Variable._execution_engine.queue_callback(self.finish_backward)
        self.ready.add(id(param))
        while (self.next_group < len(self.param_groups)
               and all(id(p) in self.ready for p in self.trainable(self.next_group))):
            self.reduce_group(self.next_group)

    def finish_backward(self) -> None:
        while self.next_group < len(self.param_groups):
            self.reduce_group(self.next_group)
        self._reset()

    def reduce_group(self, index: int) -> None:
        """Reduce-scatter group ``index``'s gradients (zeros for a missing one, with a used flag each)."""
        self.next_group = index + 1
        trainable = self.trainable(index)
        if not trainable:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                          for p in trainable])
        used = torch.tensor([p.grad is not None for p in trainable], dtype=flat.dtype, device=flat.device)
        shard, users = reduce_scatter_mean(flat, self.process_group, used)
        start = flat_shard_range(flat.numel(), self.world_size, self.rank)[0]
        offsets = dict(zip(map(id, trainable), torch.tensor([0] + [p.numel() for p in trainable]).cumsum(0).tolist()))
        for param, lo, hi, view in self.pieces[index]:
            if users[[id(p) for p in trainable].index(id(param))] > 0:
                begin = offsets[id(param)] + lo - start
                piece = shard[begin:begin + hi - lo]
                view.grad = piece.clone() if view.grad is None else view.grad.add_(piece)
        for param in trainable:
            param.grad = None

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Scale every rank's gradient shard so that the whole gradient's ``norm_type`` norm is at
        most ``max_norm`` (as ``torch.nn.utils.clip_grad_norm_`` on the unsharded gradient; 2-norm
        or inf). Returns the norm before clipping. A collective: every rank calls it."""
        grads = [view.grad for pieces in self.pieces for *_, view in pieces if view.grad is not None]
        like = self.trainable(0)[0] if self.trainable(0) else torch.zeros(())
        if norm_type == math.inf:
            total = torch.stack([g.abs().max() for g in grads]).max() if grads else like.new_zeros(())
            dist.all_reduce(total, op=dist.ReduceOp.MAX, group=self.process_group)
        else:
            total = sum((g.double().pow(norm_type).sum() for g in grads), like.new_zeros((), dtype=torch.float64))
            dist.all_reduce(total, group=self.process_group)
            total = total.pow(1 / norm_type).to(like.dtype)
        coefficient = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        for grad in grads:
            grad.mul_(coefficient.to(grad.dtype))
        return total
