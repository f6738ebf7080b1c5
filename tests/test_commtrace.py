"""labutils.measure.commtrace: recording torch.distributed calls (2 gloo ranks), patching and restoring."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import labutils
from labutils.measure import commtrace


@pytest.fixture(scope="module")
def pool():
    with labutils.Pool(2, backend="gloo", timeout=120) as p:
        yield p


def _module_functions():
    return {name: getattr(dist, name) for name in commtrace.TRACED_OPS}


# ----- patching in this process (no process group needed) -------------------------------

def test_every_traced_name_exists_in_torch_distributed():
    assert all(hasattr(dist, name) for name in commtrace.TRACED_OPS)


def test_functions_are_restored_after_the_block_and_after_an_exception():
    originals = _module_functions()
    with commtrace.record():
        assert all(getattr(dist, name) is not fn for name, fn in originals.items())
    assert all(getattr(dist, name) is fn for name, fn in originals.items())
    with pytest.raises(RuntimeError, match="boom"):
        with commtrace.record():
            raise RuntimeError("boom")
    assert all(getattr(dist, name) is fn for name, fn in originals.items())


def test_nested_blocks_keep_the_patch_until_the_outer_one_closes():
    originals = _module_functions()
    with commtrace.record():
        with commtrace.record():
            pass
        assert dist.all_reduce is not originals["all_reduce"]
    assert dist.all_reduce is originals["all_reduce"]


def test_a_patch_made_over_ours_is_left_alone(monkeypatch):
    replacement = object()
    with commtrace.record():
        monkeypatch.setattr(dist, "barrier", replacement)
    assert dist.barrier is replacement


def test_traced_functions_compare_equal_to_torchs():
    # torch's P2POp checks `op in [isend, irecv]`: the stand-in must pass that check
    isend = dist.isend
    with commtrace.record():
        assert dist.isend in [isend] and dist.isend != dist.irecv
        assert dist.isend.__wrapped__ is isend and dist.isend.__name__ == "isend"


def _trace_of(records):
    trace = commtrace.CommTrace()
    trace.records.extend(records)
    return trace


def _call(op, nbytes):
    return commtrace.CommRecord(op=op, bytes=nbytes, dtype="float32", group_size=2, duration_s=0.001,
                                async_op=False, peer=None, rank=0)


def test_summary_count_and_bytes():
    trace = _trace_of([_call("all_reduce", 16), _call("barrier", 0), _call("all_reduce", 8),
                       _call("all_gather_object", None)])
    assert trace.count() == 4 and trace.count("all_reduce") == 2 and trace.count("send") == 0
    assert trace.total_bytes() == 24 and trace.total_bytes("all_reduce") == 24
    assert list(trace.summary()) == ["all_reduce", "barrier", "all_gather_object"]
    assert trace.summary()["all_reduce"] == {"calls": 2, "bytes": 24, "duration_s": pytest.approx(0.002)}
    assert "all_reduce" in str(trace) and "no torch.distributed calls" in str(commtrace.CommTrace())
    with pytest.raises(ValueError, match="not a traced"):
        trace.count("allreduce")


def test_expect_calls_messages():
    trace = _trace_of([_call("all_reduce", 16), _call("all_reduce", 16), _call("all_gather", 32)])
    commtrace.expect_calls(trace, {"all_reduce": 2})
    with pytest.raises(AssertionError, match="^your forward did 2 all_reduce calls, expected 1$"):
        commtrace.expect_calls(trace, {"all_reduce": 1}, what="your forward")
    with pytest.raises(AssertionError, match="did 1 all_gather call, expected 0"):
        commtrace.expect_calls(trace, {"all_reduce": 2}, exact=True)
    with pytest.raises(AssertionError, match="did 0 send calls, expected 1"):
        commtrace.expect_calls(trace, {"send": 1})
    with pytest.raises(ValueError, match="not a traced"):
        commtrace.expect_calls(trace, {"allreduce": 1})


# ----- on 2 gloo ranks ------------------------------------------------------------------

def _calls_of_every_kind():
    rank, n = dist.get_rank(), dist.get_world_size()
    peer = 1 - rank
    singleton_groups = [dist.new_group([r]) for r in range(n)]
    with commtrace.record() as trace:
        dist.all_reduce(torch.ones(4))                                   # 16 B
        dist.all_reduce(torch.ones(4), group=singleton_groups[rank])     # group of 1
        dist.broadcast(torch.ones(2, dtype=torch.float64), src=1)        # 16 B, root 1
        dist.reduce(torch.ones(2), dst=0)                                # 8 B, root 0
        dist.all_gather([torch.empty(3) for _ in range(n)], torch.ones(3))              # 24 B
        dist.all_gather_into_tensor(torch.empty(2 * n), torch.ones(2))                  # 16 B
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * n))                   # 16 B
        dist.all_to_all_single(torch.empty(2 * n), torch.ones(2 * n))                   # 16 B
        dist.gather(torch.ones(1), [torch.empty(1) for _ in range(n)] if rank == 0 else None, dst=0)  # 8 B
        dist.scatter(torch.empty(1), [torch.ones(1) for _ in range(n)] if rank == 0 else None, src=0)  # 8 B
        if rank == 0:
            dist.send(torch.ones(5, dtype=torch.int8), dst=1)           # 5 B
        else:
            dist.recv(torch.empty(5, dtype=torch.int8), src=0)
        ops = [dist.P2POp(dist.isend, torch.ones(2), peer), dist.P2POp(dist.irecv, torch.empty(2), peer)]
        for work in dist.batch_isend_irecv(ops):                        # 16 B, async
            work.wait()
        work = dist.isend(torch.ones(1), peer) if rank == 0 else dist.irecv(torch.empty(1), peer)
        work.wait()
        dist.all_gather_object([None] * n, {"rank": rank})               # bytes unknown
        dist.barrier()
    dist.all_reduce(torch.ones(1))  # after the block: not recorded
    return [(r.op, r.bytes, r.dtype, r.group_size, r.async_op, r.peer, r.rank) for r in trace.records]


def test_every_kind_of_call_is_recorded(pool):
    for rank, calls in enumerate(pool.run(_calls_of_every_kind)):
        p2p = ("send", 5, "int8", 2, False, 1, 0) if rank == 0 else ("recv", 5, "int8", 2, False, 0, 1)
        single = ("isend", 4, "float32", 2, True, 1, 0) if rank == 0 else ("irecv", 4, "float32", 2, True, 0, 1)
        assert calls == [
            ("all_reduce", 16, "float32", 2, False, None, rank),
            ("all_reduce", 16, "float32", 1, False, None, rank),
            ("broadcast", 16, "float64", 2, False, 1, rank),
            ("reduce", 8, "float32", 2, False, 0, rank),
            ("all_gather", 24, "float32", 2, False, None, rank),
            ("all_gather_into_tensor", 16, "float32", 2, False, None, rank),
            ("reduce_scatter_tensor", 16, "float32", 2, False, None, rank),
            ("all_to_all_single", 16, "float32", 2, False, None, rank),
            ("gather", 8, "float32", 2, False, 0, rank),
            ("scatter", 8, "float32", 2, False, 0, rank),
            p2p,
            ("batch_isend_irecv", 16, "float32", 2, True, None, rank),
            single,
            ("all_gather_object", None, None, 2, False, None, rank),
            ("barrier", 0, None, 2, False, None, rank),
        ]


def _autograd_all_reduce():
    import torch.distributed.nn.functional as dist_fn

    x = torch.full((3,), float(dist.get_rank() + 1), requires_grad=True)
    with commtrace.record() as forward:
        y = dist_fn.all_reduce(x)
    with commtrace.record() as backward:
        (y * 2).sum().backward()
    return forward.count("all_reduce"), backward.count("all_reduce"), y.detach(), x.grad


def test_backward_collectives_of_autograd_functions_are_recorded(pool):
    for forward, backward, y, grad in pool.run(_autograd_all_reduce):
        assert (forward, backward) == (1, 1)
        assert torch.equal(y, torch.full((3,), 3.0))
        assert torch.equal(grad, torch.full((3,), 4.0))  # the all-reduce of both ranks' upstream 2s


def _nested_traces():
    with commtrace.record() as outer:
        dist.all_reduce(torch.ones(1))
        with commtrace.record() as inner:
            dist.broadcast(torch.ones(1), src=0)
        dist.barrier()
    return outer.count(), inner.count(), [r.op for r in inner.records], type(dist.all_reduce).__name__


def test_nested_traces_each_see_their_calls(pool):
    for outer, inner, inner_ops, restored_type in pool.run(_nested_traces):
        assert (outer, inner, inner_ops) == (3, 1, ["broadcast"])
        assert restored_type == "function"


def _expect_two_all_reduces():
    with commtrace.record() as trace:
        dist.all_reduce(torch.ones(1))
        dist.all_reduce(torch.ones(1))
    commtrace.expect_calls(trace, {"all_reduce": 1}, what="your forward")


def test_expect_calls_fails_on_the_ranks_with_the_message(pool):
    with pytest.raises(AssertionError, match="your forward did 2 all_reduce calls, expected 1"):
        pool.run(_expect_two_all_reduces)


def _fsdp2_step():
    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from labutils.measure import commtrace

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    with commtrace.record() as trace:
        model(torch.randn(4, 8)).sum().backward()
    return {op: trace.count(op) for op in ("all_gather_single", "reduce_scatter_single")}, dist.get_world_size()


def test_fsdp2_collectives_are_recorded():
    import labutils

    for counts, _ in labutils.launch(_fsdp2_step, 2, timeout=120):
        assert counts["all_gather_single"] >= 2 and counts["reduce_scatter_single"] >= 2, counts


# ----- below the public API: the judge's recording process group (grading.judge.recording) -------------

def _every_path_to_the_process_group():
    """On 2 ranks: the same all-reduce through dist, distributed_c10d, the group object and a new
    group; equivalent all-gathers; point-to-point; a dummy one-element all-reduce."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    from grading.judge import recording

    recording.install()
    start = recording.log_position()
    t = torch.ones(6)
    dist.all_reduce(t)
    distributed_c10d.all_reduce(t)
    dist.group.WORLD.allreduce([t]).wait()
    dist.all_reduce(t, group=dist.new_group([0, 1]))
    dist.all_gather_into_tensor(torch.empty(12), torch.ones(6))
    dist.all_gather([torch.empty(6), torch.empty(6)], torch.ones(6))
    if dist.get_rank() == 0:
        dist.isend(t, 1).wait()
    else:
        dist.recv(t, 0)
    dist.all_reduce(torch.zeros(1))
    return [tuple(m) for m in recording.since(start)]


def test_every_path_reaches_the_recording_process_group_with_its_bytes():
    import labutils

    records = labutils.launch(_every_path_to_the_process_group, 2, backend="gloo", timeout=60)
    for rank, messages in enumerate(records):
        p2p = ("send", 24, 1, 2) if rank == 0 else ("recv", 24, 0, 2)
        assert messages == [("all_reduce", 24, None, 2)] * 4 + [("all_gather", 24, None, 2)] * 2 + [
            p2p, ("all_reduce", 4, None, 2)]
