"""LABUTILS_STRICT_COLLECTIVES: NCCL's rules enforced on CPU (gloo), ending a mismatch in seconds."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import labutils
from labutils.ranks import strict

pytestmark = [pytest.mark.fakegpu, pytest.mark.usefixtures("no_leftover_processes")]


def _different_shapes():
    dist.all_reduce(torch.ones(4 if dist.get_rank() == 0 else 3))


def _different_ops():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(2))
    else:
        dist.broadcast(torch.ones(2), src=0)


def _only_rank_0_reduces():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))


@pytest.fixture
def strict_on(monkeypatch):
    monkeypatch.setenv(strict.ENV, "1")


@pytest.mark.usefixtures("strict_on")
@pytest.mark.parametrize("fn, words", [(_different_shapes, ("all_reduce of float32 [4]", "all_reduce of float32 [3]")),
                                       (_different_ops, ("all_reduce of float32 [2]", "broadcast of float32 [2]"))])
def test_mismatched_collectives_under_strict_end_the_launch_naming_both_ranks_and_calls(fn, words):
    # timeout=60: a hang would end as RankTimeoutError, not as this message
    with pytest.raises(strict.CollectiveMismatchError) as info:
        labutils.launch(fn, 2, backend="gloo", timeout=60)
    text = str(info.value)
    assert "rank 0 called" in text and "rank 1 called" in text and all(word in text for word in words)


def _ddp_step():
    from torch.nn.parallel import DistributedDataParallel

    model = torch.nn.Linear(4, 1)
    DistributedDataParallel(model)(torch.ones(2, 4)).sum().backward()
    return model.weight.grad.sum().item()


def test_ddp_runs_under_strict_where_torchs_detail_wrapper_crashes_it(strict_on):
    assert labutils.launch(_ddp_step, 2, backend="gloo", timeout=60) == [8.0, 8.0]


@pytest.mark.usefixtures("strict_on")
def test_a_rank_skipping_a_collective_under_strict_ends_with_a_mismatch_not_a_hang():
    with pytest.raises(strict.CollectiveMismatchError) as info:
        labutils.launch(_only_rank_0_reduces, 2, backend="gloo", timeout=60)
    assert "rank 1 returned without calling all_reduce, which rank 0 is still inside" in str(info.value)


@pytest.mark.usefixtures("strict_on")
def test_the_pool_runs_the_next_call_on_fresh_ranks_after_a_strict_mismatch():
    with labutils.Pool(2, backend="gloo", timeout=60) as pool:
        with pytest.raises(strict.CollectiveMismatchError):
            pool.run(_different_shapes)
        assert pool.run(dist.get_rank) == [0, 1]


def _checks_in_place():
    return getattr(dist.all_reduce, "__labutils_strict__", False), getattr(dist.isend, "__labutils_strict__", False)


def test_strict_ranks_check_collectives_and_leave_point_to_point_calls_alone(strict_on):
    assert labutils.launch(_checks_in_place, 2, backend="gloo", timeout=60) == [(True, False)] * 2


def test_without_the_switch_ranks_run_torch_distributed_untouched(monkeypatch):
    monkeypatch.delenv(strict.ENV, raising=False)
    assert labutils.launch(_checks_in_place, 2, backend="gloo", timeout=60) == [(False, False)] * 2


def test_a_tensor_off_the_ranks_gpu_fails_under_strict_as_it_would_hang_nccl():
    seen = []
    checked = strict.device_checked(lambda tensor, **kw: seen.append(tensor), "all_reduce", torch.device("cuda", 1))
    with pytest.raises(strict.CollectiveDeviceError, match="all_reduce got a tensor on cpu, but this rank's device "
                                                           "is cuda:1.*labutils.rank.device"):
        checked(torch.ones(1))
    assert not seen


def test_tensors_inside_lists_are_checked_too_so_all_gather_outputs_cannot_slip_by():
    checked = strict.device_checked(lambda *args, **kw: None, "all_gather", torch.device("cuda", 0))
    with pytest.raises(strict.CollectiveDeviceError):
        checked([torch.ones(1)], torch.ones(1))


def test_a_tensor_on_the_ranks_device_passes_the_check():
    seen = []
    strict.device_checked(lambda tensor: seen.append(tensor), "all_reduce", torch.device("cpu"))(torch.ones(1))
    assert len(seen) == 1


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_the_switch_reads_like_a_flag(monkeypatch, value, on):
    monkeypatch.setenv(strict.ENV, value)
    assert strict.enabled() is on


def test_the_test_suite_itself_runs_with_the_strict_switch_on():
    assert os.environ.get(strict.ENV) == "1"


def test_nightly_kernels_launch_with_the_strict_switch_on(monkeypatch):
    from grading.nightly.processes import KernelChoice, subprocess_env

    monkeypatch.delenv(strict.ENV, raising=False)
    assert subprocess_env(KernelChoice("python3", None, "this interpreter"))[strict.ENV] == "1"


@pytest.mark.parametrize("markexpr, selects", [("gpu or multigpu", True), ("multigpu", True), ("", False),
                                              ("not gpu", False), ("slow and not gpu", False), ("fakegpu", False)])
def test_only_a_gpu_run_of_the_suite_sees_the_gpus_so_make_test_passes_on_a_gpu_node(markexpr, selects):
    from gpu_selection import selects_gpu_tests

    assert selects_gpu_tests(markexpr) is selects


def test_tests_not_marked_gpu_see_no_gpu():
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == ""


def _ring_with_p2pop():
    rank, world = dist.get_rank(), dist.get_world_size()
    out, got = torch.full((2,), float(rank)), torch.empty(2)
    ops = [dist.P2POp(dist.isend, out, (rank + 1) % world), dist.P2POp(dist.irecv, got, (rank - 1) % world)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return got[0].item()


def test_strict_mode_leaves_point_to_point_calls_usable_in_batch_isend_irecv(strict_on):
    assert labutils.launch(_ring_with_p2pop, 2, backend="gloo", timeout=60) == [1.0, 0.0]


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class _StackLinks:
    """Three ranks: ``stacks`` says where each still-running rank is."""

    world_size = 3

    def __init__(self, stacks):
        self._stacks = stacks

    def stacks(self, ranks):
        return {r: self._stacks[r] for r in ranks}


IN_ALL_REDUCE = 'File "/x/torch/distributed/distributed_c10d.py", line 1, in all_reduce\n'
COMPUTING = 'File "/x/model.py", line 3, in forward\n'


def _notice_after(monkeypatch, stacks, seconds):
    from labutils.ranks import _replies

    clock = _Clock()
    monkeypatch.setattr(_replies.time, "monotonic", clock)
    notice = _replies.StragglerNotice(_StackLinks(stacks), 120.0)
    while clock.now < 100.0 + seconds:
        notice.update({1, 2})
        clock.now += 0.25
    return notice


def test_strict_calls_it_a_mismatch_only_when_every_running_rank_sits_in_a_collective(monkeypatch, strict_on, capsys):
    notice = _notice_after(monkeypatch, {1: IN_ALL_REDUCE, 2: IN_ALL_REDUCE}, 9)
    assert notice.mismatch and "rank 0 returned without calling all_reduce" in notice.mismatch


def test_strict_does_not_fail_a_subgroup_collective_whose_peer_is_still_computing(monkeypatch, strict_on, capsys):
    notice = _notice_after(monkeypatch, {1: IN_ALL_REDUCE, 2: COMPUTING}, 9)
    assert notice.mismatch is None
    assert "rank 1 is still in all_reduce" in capsys.readouterr().out  # still told, once


def test_without_strict_a_rank_left_in_a_collective_is_only_told_never_failed(monkeypatch, capsys):
    monkeypatch.delenv(strict.ENV, raising=False)
    notice = _notice_after(monkeypatch, {1: IN_ALL_REDUCE, 2: IN_ALL_REDUCE}, 9)
    assert notice.mismatch is None and capsys.readouterr().out.count("still in all_reduce") == 1


def test_a_roots_gather_list_is_not_called_a_mismatch_but_a_different_shape_is():
    one, three = [torch.ones(1)], [torch.ones(1)] * 3
    assert strict.fingerprint("gather", one) == strict.fingerprint("gather", one + three)
    assert strict.fingerprint("all_reduce", [torch.ones(4)]) != strict.fingerprint("all_reduce", [torch.ones(3)])
    assert strict.fingerprint("all_to_all_single", [torch.ones(4)]) == strict.fingerprint("all_to_all_single", [torch.ones(6)])
