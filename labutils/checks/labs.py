"""The helpers of the graded labs' visible tests: compare what every rank returned with dense
single-process maths and raise :class:`CheckFailed` with one line saying what differs on which rank.

A lab imports what its visible tests use, in one read-only cell::

    from labutils.checks.labs import CheckFailed, calls, check_calls, check_close, on_rank

These run in the student's notebook and on its ranks; the graded verdict is the judge's, never theirs.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from labutils.measure import commtrace
from labutils.checks.base import CheckFailed
from labutils.ranks.launch import launch
from labutils.ranks.rank import device as rank_device

__all__ = [
    "CheckFailed", "adam_reference", "adamw_reference", "calls", "check_calls", "check_close", "check_equal",
    "check_gradients",
    "check_pipeline_schedule", "full_batch_gradients", "gradients", "load_shard", "local_backward",
    "messages", "on_rank", "replica", "small_integers",
]


# ----- comparing one rank's result ----------------------------------------------------------------

def _check_tensor(what: str, got, expected: torch.Tensor, rank: int) -> None:
    if got is None:
        raise CheckFailed(f"{what} on rank {rank}: got None")
    if not isinstance(got, torch.Tensor):
        raise CheckFailed(f"{what} on rank {rank}: got {type(got).__name__}, expected a tensor")
    if tuple(got.shape) != tuple(expected.shape):
        raise CheckFailed(f"{what} on rank {rank}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")


def check_close(what: str, got, expected: torch.Tensor, rank: int, tol: float = 1e-4) -> None:
    """Raise one line saying what differs on which rank unless ``got`` is a tensor of ``expected``'s
    shape within ``tol`` (absolute and relative) of it."""
    _check_tensor(what, got, expected, rank)
    got, expected = got.detach().cpu(), expected.detach().cpu()
    if not torch.allclose(got.to(expected.dtype), expected, atol=tol, rtol=tol):
        error = (got.double() - expected.double()).abs().max().item()
        raise CheckFailed(f"{what} on rank {rank}: max |got - expected| = {error:.3g}")


def check_equal(what: str, got, expected: torch.Tensor, rank: int) -> None:
    """Raise one line unless ``got`` equals ``expected`` exactly, dtype included (for values that
    every summation order reproduces, such as :func:`small_integers`)."""
    _check_tensor(what, got, expected, rank)
    if got.dtype != expected.dtype:
        raise CheckFailed(f"{what} on rank {rank}: dtype {got.dtype}, expected {expected.dtype}")
    got = got.detach().cpu()
    if not torch.equal(got, expected.cpu()):
        error = (got.double() - expected.double().cpu()).abs().max().item()
        raise CheckFailed(f"{what} on rank {rank}: max |got - expected| = {error:.3g}")


def check_gradients(what: str, got: dict, expected: dict, rank: int, tol: float = 1e-4) -> None:
    """Compare {name: gradient or None} (what :func:`gradients` returns) with ``expected`` of the same
    form: a tensor within ``tol``, or None where no gradient may exist (a frozen parameter, one that
    no rank used: a zero gradient there would still move it under momentum or weight decay)."""
    if not isinstance(got, dict):
        raise CheckFailed(f"{what} on rank {rank}: got {type(got).__name__}, expected {{name: gradient}}")
    for name, grad in expected.items():
        if grad is None and got.get(name) is not None:
            raise CheckFailed(f"{what}: {name} on rank {rank} has a gradient, expected None (frozen or used by no rank)")
        if grad is not None:
            check_close(f"{what}: gradient of {name}", got.get(name), grad, rank, tol)


def _describe_counts(counts: dict) -> str:
    return ", ".join(f"{n} {op}" for op, n in sorted(counts.items())) or "no call"


def check_calls(what: str, got: dict, expected: dict, rank: int) -> None:
    """Raise one line unless the code made exactly the calls ``expected`` ({op: number of calls})."""
    if not isinstance(got, dict):
        raise CheckFailed(f"{what} on rank {rank}: got {type(got).__name__}, expected {{op: calls}}")
    if got != expected:
        raise CheckFailed(f"{what} on rank {rank} made {_describe_counts(got)}, expected {_describe_counts(expected)}")


# ----- what a rank recorded -----------------------------------------------------------------------

def calls(trace) -> dict:
    """{op: number of calls} recorded by a ``labutils.measure.commtrace`` trace."""
    return {op: entry["calls"] for op, entry in trace.summary().items()}


def messages(trace) -> dict:
    """{"send": n, "recv": n, ...} from a commtrace trace, isend counted as send and irecv as recv."""
    counts: dict = {}
    for op, entry in trace.summary().items():
        op = {"isend": "send", "irecv": "recv"}.get(op, op)
        counts[op] = counts.get(op, 0) + entry["calls"]
    return counts


def gradients(model) -> dict:
    """{parameter name: its gradient on the CPU, or None when it has none}."""
    return {name: None if p.grad is None else p.grad.detach().cpu() for name, p in model.named_parameters()}


# ----- inputs on a rank ---------------------------------------------------------------------------

def on_rank(tensor: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
    """A copy of ``tensor`` on this rank's device (cuda:k under NCCL, cpu under gloo)."""
    return tensor.detach().to(rank_device()).clone().requires_grad_(requires_grad)


def small_integers(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Values in [-8, 8]: exact in every dtype, so every summation order gives the same sum."""
    return torch.randint(-8, 9, shape).to(dtype)


def load_shard(param, shard: torch.Tensor, name: str, rank: int) -> None:
    """Copy a shard of the dense weights into a parameter of the same shape (on this rank)."""
    if param is None or tuple(param.shape) != tuple(shard.shape):
        got = None if param is None else tuple(param.shape)
        raise CheckFailed(f"{name} on rank {rank} has shape {got}, expected this rank's shard {tuple(shard.shape)}")
    with torch.no_grad():
        param.copy_(shard)


def replica(model, state: dict):
    """``model`` moved to this rank's device, holding the parameters in ``state`` (a state_dict)."""
    model = model.to(rank_device())
    model.load_state_dict(state)
    return model


def local_backward(model, x: torch.Tensor, y: torch.Tensor) -> None:
    """Backward of the mean squared error on this rank's contiguous 1/N of the batch (x, y)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    x_local, y_local = x.tensor_split(n)[rank].to(rank_device()), y.tensor_split(n)[rank].to(rank_device())
    F.mse_loss(model(x_local), y_local).backward()


# ----- dense answers, in this process -------------------------------------------------------------

def full_batch_gradients(model, state: dict, x: torch.Tensor, y: torch.Tensor) -> dict:
    """{name: gradient} of the mean squared error of ``model`` (loaded with ``state``) over the whole
    batch, in this process; zeros for a parameter the forward pass never uses."""
    model.load_state_dict(state)
    F.mse_loss(model(x), y).backward()
    return {name: p.grad if p.grad is not None else torch.zeros_like(p) for name, p in model.named_parameters()}


def adam_reference(params: list, grads_per_step: list, *, lr: float, betas: tuple, eps: float) -> list:
    """``torch.optim.Adam`` on the unsharded parameters, fed ``grads_per_step[step][i]``; the final parameters."""
    params = [p.detach().clone().requires_grad_(True) for p in params]
    optimizer = torch.optim.Adam(params, lr=lr, betas=betas, eps=eps)
    for grads in grads_per_step:
        for param, grad in zip(params, grads):
            param.grad = grad.clone()
        optimizer.step()
    return [p.detach() for p in params]


def adamw_reference(param_groups: list, grads_per_step: list, **defaults) -> list:
    """``torch.optim.AdamW(param_groups, **defaults)`` on copies of the unsharded parameters (groups as
    torch takes them: dicts with "params" and their own lr, betas, eps, weight_decay), fed
    ``grads_per_step[step][i]`` for the groups' i-th parameter in order (None: no gradient, as a
    frozen one gets); the final parameters, in that order."""
    groups = [{**group, "params": [p.detach().clone().requires_grad_(True) for p in group["params"]]}
              for group in param_groups]
    params = [p for group in groups for p in group["params"]]
    optimizer = torch.optim.AdamW(groups, **defaults)
    for grads in grads_per_step:
        for param, grad in zip(params, grads):
            param.grad = None if grad is None else grad.clone()
        optimizer.step()
    return [p.detach() for p in params]


# ----- a pipeline schedule against the dense model ------------------------------------------------

def _run_stage(schedule, make_stage, num_layers: int, model_state: dict, inputs, targets):
    """On one rank: build its stage of the model (layers ``rank * L/p`` on), run ``schedule`` on it."""
    rank, p = dist.get_rank(), dist.get_world_size()
    per_stage = num_layers // p
    stage = make_stage(per_stage).to(rank_device())
    stage.load_state_dict({f"{2 * local}.{what}": model_state[f"{2 * (rank * per_stage + local)}.{what}"]
                           for local in range(per_stage) for what in ("weight", "bias")})
    with commtrace.record() as trace:
        loss, peak, actions = schedule(stage, list(inputs.to(rank_device())), list(targets.to(rank_device())),
                                       dist.group.WORLD)
    grads = {name: param.grad.detach().cpu() for name, param in stage.named_parameters()}
    return loss, peak, actions, grads, messages(trace)


def _check_stage(rank: int, p: int, result, model, loss, expected_peak, num_layers: int, num_microbatches: int):
    stage_loss, peak, _actions, grads, sent = result
    per_stage = num_layers // p
    for local in range(per_stage):
        layer = model[2 * (rank * per_stage + local)]
        for what in ("weight", "bias"):
            check_close(f"gradient of layer {rank * per_stage + local}'s {what}", grads[f"{2 * local}.{what}"],
                        getattr(layer, what).grad, rank)
    if rank == p - 1:
        check_close("the loss returned by the last stage (the whole batch's mean)", stage_loss.reshape(()).cpu(),
                    loss.detach(), rank)
    if peak != expected_peak(rank):
        raise CheckFailed(f"rank {rank}: peak microbatches in flight {peak}, expected {expected_peak(rank)}")
    messages_expected = num_microbatches * ((rank > 0) + (rank < p - 1))
    if sent != {"send": messages_expected, "recv": messages_expected}:
        raise CheckFailed(f"rank {rank} made {sent}, expected {messages_expected} sends and receives")


def check_pipeline_schedule(schedule, expected_peak, make_stage, *, num_layers: int, hidden: int, microbatch: int,
                            num_microbatches: int, world_size: int, backend: str = "auto") -> list:
    """Run ``schedule(stage, microbatches, targets, group)`` on ``world_size`` pipeline stages of a
    model of ``make_stage(num_layers)`` (Linear, Tanh, ...) and check every stage's gradients, the
    last stage's loss, the peak microbatches in flight (``expected_peak(rank)``) and the sends and
    receives against the whole model in this process. Returns each stage's list of actions."""
    if num_layers % world_size:
        raise ValueError(f"num_layers={num_layers} must be divisible by world_size={world_size}")
    model = make_stage(num_layers)
    inputs = torch.randn(num_microbatches, microbatch, hidden)
    targets = torch.randn(num_microbatches, microbatch, hidden)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    loss = F.mse_loss(model(inputs.reshape(-1, hidden)), targets.reshape(-1, hidden))  # one process, whole batch
    loss.backward()
    results = launch(_run_stage, world_size, schedule, make_stage, num_layers, state, inputs, targets,
                     backend=backend)
    for rank, result in enumerate(results):
        _check_stage(rank, world_size, result, model, loss, expected_peak, num_layers, num_microbatches)
    return [result[2] for result in results]
