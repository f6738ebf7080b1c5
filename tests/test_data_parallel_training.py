"""The DataParallel wrapper (the reference's, grading/reference/data_parallel.py, and the lab 3
solution's) trains like one process on the whole batch: a model with a frozen layer, a layer
that only rank 0's samples use, a layer that no rank uses and a buffer; ranks that start apart;
two microbatches per step accumulated under no_sync(); AdamW and SGD with momentum, both with
weight decay (which moves any parameter handed a zero gradient instead of None). After several
steps every parameter matches single-process torch to float32 tolerance, the frozen and the
unused layers are unchanged, and their gradients are None."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import labutils
from graded_lab import GradedLab
from grading.reference.data_parallel import DataParallel as ReferenceDataParallel

STEPS, BATCH, MICROBATCHES, BUCKET_CAP_BYTES = 3, 24, 2, 128  # 24 rows: equal microbatches on 2, 3 or 4 ranks
#: Float32 tolerance of the comparisons (summation order differs between d ranks and one process).
RTOL, ATOL = 1e-5, 1e-5
OPTIMIZERS = {
    "AdamW": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.1),
    "SGD with momentum": lambda params: torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=0.1),
}
pytestmark = pytest.mark.usefixtures("no_leftover_processes")


class FrozenStemNet(nn.Module):
    """out(tanh(body(tanh(stem(x + shift))))) + aux(...) on the first ``aux_rows`` rows; ``stem`` is
    frozen, ``spare`` never called, ``shift`` a buffer."""

    def __init__(self):
        super().__init__()
        self.stem, self.body = nn.Linear(5, 8), nn.Linear(8, 8)
        self.out, self.aux, self.spare = nn.Linear(8, 3), nn.Linear(8, 3), nn.Linear(8, 3)
        self.register_buffer("shift", torch.randn(5))
        self.stem.requires_grad_(False)

    def forward(self, x, aux_rows: int = 0):
        hidden = torch.tanh(self.body(torch.tanh(self.stem(x + self.shift))))
        out = self.out(hidden)
        return torch.cat([out[:aux_rows] + self.aux(hidden[:aux_rows]), out[aux_rows:]]) if aux_rows else out


def _aux_used(step: int) -> bool:
    return step % 2 == 0  # even steps (the last one too): rank 0's samples go through aux; odd steps: nobody's


def _train_on_ranks(wrapper_class, state, inputs, targets):
    """On each rank: for every optimizer, DataParallel training from a replica that starts apart."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    trained = {}
    for name, make_optimizer in OPTIMIZERS.items():
        model = FrozenStemNet()
        model.load_state_dict(state)
        if rank != 0:
            with torch.no_grad():
                for tensor in [*model.parameters(), *model.buffers()]:
                    tensor.add_(0.3)
        wrapped = wrapper_class(model, dist.group.WORLD, BUCKET_CAP_BYTES)
        optimizer = make_optimizer(model.parameters())  # all of them: the optimizer must skip a None gradient
        for step, (x, y) in enumerate(zip(inputs, targets)):
            optimizer.zero_grad(set_to_none=True)
            pieces = zip(x.tensor_split(world_size)[rank].tensor_split(MICROBATCHES),
                         y.tensor_split(world_size)[rank].tensor_split(MICROBATCHES))
            for index, (x_micro, y_micro) in enumerate(pieces):
                aux_rows = len(x_micro) if rank == 0 and _aux_used(step) else 0
                with wrapped.no_sync() if index < MICROBATCHES - 1 else contextlib.nullcontext():
                    (F.mse_loss(wrapped(x_micro, aux_rows), y_micro) / MICROBATCHES).backward()
            wrapped.finish_gradient_synchronization()
            optimizer.step()
        trained[name] = ({key: value.clone() for key, value in model.state_dict().items()},
                         {key: p.grad is not None for key, p in model.named_parameters()})
    return trained


def _train_in_one_process(state, inputs, targets, make_optimizer, world_size: int):
    model = FrozenStemNet()
    model.load_state_dict(state)
    optimizer = make_optimizer(model.parameters())
    for step, (x, y) in enumerate(zip(inputs, targets)):
        optimizer.zero_grad(set_to_none=True)
        F.mse_loss(model(x, BATCH // world_size if _aux_used(step) else 0), y).backward()  # rank 0's rows come first
        optimizer.step()
    return model


def _check_like_one_process(wrapper_class, world_size: int):
    torch.manual_seed(world_size)
    state = {key: value.clone() for key, value in FrozenStemNet().state_dict().items()}
    inputs, targets = torch.randn(STEPS, BATCH, 5), torch.randn(STEPS, BATCH, 3)
    per_rank = labutils.launch(_train_on_ranks, world_size, wrapper_class, state, inputs, targets, backend="gloo")
    for name, make_optimizer in OPTIMIZERS.items():
        single = _train_in_one_process(state, inputs, targets, make_optimizer, world_size)
        for rank, trained in enumerate(per_rank):
            got_state, has_grad = trained[name]
            for key, expected in single.state_dict().items():
                torch.testing.assert_close(got_state[key], expected, rtol=RTOL, atol=ATOL,
                                           msg=lambda m, key=key, rank=rank: f"{name}, {key} on rank {rank}: {m}")
            for key in ("stem.weight", "stem.bias", "spare.weight", "spare.bias"):  # untouched, no gradient
                assert torch.equal(got_state[key], state[key]), (name, key, rank)
                assert not has_grad[key], (name, key, rank)
            assert has_grad["aux.weight"] and has_grad["body.weight"], (name, rank)  # the last step used aux


def test_the_reference_wrapper_trains_like_one_process_on_3_ranks():
    _check_like_one_process(ReferenceDataParallel, 3)


def test_the_lab_solutions_wrapper_trains_like_one_process_on_2_ranks():
    namespace = GradedLab("lab03_data_parallel", rank_timeout_s=30.0).solution_namespace()
    _check_like_one_process(namespace["DataParallel"], 2)


def test_check_gradients_wants_none_where_no_gradient_may_exist():
    from labutils.checks.labs import CheckFailed, check_gradients

    expected = {"fc.weight": torch.ones(2), "stem.weight": None}
    check_gradients("step 1", {"fc.weight": torch.ones(2) + 1e-6, "stem.weight": None}, expected, rank=0)
    with pytest.raises(CheckFailed, match=r"^step 1: stem\.weight on rank 1 has a gradient, expected None"):
        check_gradients("step 1", {"fc.weight": torch.ones(2), "stem.weight": torch.zeros(2)}, expected, rank=1)
    with pytest.raises(CheckFailed, match=r"^step 1: gradient of fc\.weight on rank 0: got None$"):
        check_gradients("step 1", {"fc.weight": None, "stem.weight": None}, expected, rank=0)


def _second_backward_without_finish():
    model = ReferenceDataParallel(FrozenStemNet(), dist.group.WORLD, BUCKET_CAP_BYTES)
    x = torch.randn(4, 5)
    model(x).sum().backward()
    try:
        model(x).sum().backward()
    except RuntimeError as exc:
        return str(exc)
    return None


def test_the_reference_wrapper_refuses_a_second_backward_before_finish():
    (message,) = labutils.launch(_second_backward_without_finish, 1, backend="gloo")
    assert message is not None and "a second backward before finish_gradient_synchronization()" in message


@pytest.mark.parametrize("caps", [(128, None), (128, 40), (1, None), (10_000, None), (200, 1)])
def test_buckets_are_the_ones_torch_computes_for_ddp(caps):
    """``make_buckets`` (the reference's and the solution's) against torch's own bucketing,
    ``torch.distributed._compute_bucket_assignment_by_size``, on the parameters in backward's order."""
    from grading.reference.data_parallel import make_buckets

    cap, first = caps
    namespace = GradedLab("lab03_data_parallel", rank_timeout_s=30.0).solution_namespace()
    params = [p for p in FrozenStemNet().parameters() if p.requires_grad]
    backward_order = list(reversed(params))
    limits = [cap] if first is None else [first, cap]
    torch_buckets, _ = dist._compute_bucket_assignment_by_size(backward_order, limits)
    want = [[id(backward_order[i]) for i in bucket] for bucket in torch_buckets]
    for make in (make_buckets, namespace["make_buckets"]):
        got = make(params, cap) if first is None else make(params, cap, first)
        assert [[id(p) for p in bucket] for bucket in got] == want, (caps, make)


def _ddp_buckets(cap_mb) -> tuple:
    """DDP's buckets after its first steps (rebuilt in backward's order), as parameter indices, and
    the reference DataParallel's, on a model of three 0.5 MiB layers and a small last one."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(362, 362), nn.Linear(362, 362), nn.Linear(362, 362), nn.Linear(362, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=cap_mb)
    for _ in range(3):  # buckets are rebuilt in the second step, logged in the third
        ddp(torch.randn(2, 362)).sum().backward()
    rebuilt = ddp._get_ddp_logging_data()["rebuilt_per_bucket_param_indices"]
    index = {id(p): i for i, p in enumerate(model.parameters())}
    ours = ReferenceDataParallel(model, dist.group.WORLD, None if cap_mb is None else int(cap_mb * 2**20))
    return ([[int(i) for i in bucket.split()] for bucket in rebuilt.split(",")],
            [[index[id(p)] for p in bucket] for bucket in ours.buckets])


@pytest.mark.parametrize("cap_mb", [None, 1, 0.5])
def test_data_parallel_buckets_like_ddp_with_its_small_first_bucket(cap_mb):
    """Without a cap, DDP's first bucket is 1 MiB and reaches it at the third layer's weight (1 057 056
    bytes): a bucket closes once it reaches its cap, so it may pass it, as the reference's does."""
    torch_buckets, ours = labutils.launch(_ddp_buckets, 2, cap_mb, backend="gloo")[0]
    assert ours == torch_buckets, cap_mb
