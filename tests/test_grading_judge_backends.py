"""The judge's backends: gloo by default (its traffic check complete), NCCL as an option that says
what it does not check; the recording group behaves on NCCL as torch's own groups do (a device bound
at init, one communicator per group made at once, batched sends and receives coalesced, object
collectives on the group's device), proven with faked NCCL backends on CPU; and collectives NCCL
runs (``all_gather_into_tensor`` into a stacked output) also run on the judge's gloo group."""
from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

import labutils
from grading import grade
from grading.cli import build_parser
from grading.judge import perrank, recording

#: One rank template for the whole module; afterwards no process of ours may survive.
pytestmark = pytest.mark.usefixtures("no_leftover_processes_after_the_module", "judge_in_this_process")


# ----- grade on gloo; NCCL says what it does not check ----------------------------------------------

def test_course_grade_judges_on_gloo_by_default_and_nccl_says_it_skips_the_traffic_check():
    parser = build_parser("grade")
    args = parser.parse_args(["grade", "lab01_tensor_parallel", "submissions"])
    assert args.backend == "gloo"
    assert parser.parse_args(["grade", "lab01_tensor_parallel", "s", "--backend", "nccl"]).backend == "nccl"
    with pytest.raises(SystemExit):
        parser.parse_args(["grade", "lab01_tensor_parallel", "s", "--backend", "auto"])
    assert "NOT checked" in grade.BACKEND_HELP and "loopback" in grade.BACKEND_HELP


class _FakePool:
    """A labutils Pool on ``backend`` whose ranks share this process's network namespace."""

    def __init__(self, world_size, backend="gloo", timeout=None):
        self.world_size, self.backend = world_size, backend

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def starter_pid(self):
        return os.getpid()

    def run_each(self, fn, args_of_rank, timeout):
        return [fn(*args) for args in args_of_rank]


def test_a_launch_on_nccl_does_not_count_loopback_bytes_and_says_so_in_the_judge_log(monkeypatch, capsys):
    monkeypatch.setattr(perrank, "Pool", lambda n, backend, timeout: _FakePool(n, "nccl"))
    monkeypatch.setattr(perrank, "LoopbackMeter", _MeterThatMustNotBeRead)
    results = perrank.launch_each(int, [("3",), ("4",)], backend="nccl", timeout=10)
    assert list(results) == [3, 4] and results.loopback_bytes is None
    assert perrank.NOT_CHECKED_ON_NCCL in capsys.readouterr().out


class _MeterThatMustNotBeRead:
    @classmethod
    def around(cls, pid):
        raise AssertionError("the loopback count was read on NCCL")


# ----- the recording group on NCCL, with faked NCCL backends ------------------------------------------

def test_the_recording_default_group_binds_the_ranks_device_on_nccl_so_no_communicator_is_built_lazily(monkeypatch):
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    assert recording._init_options("nccl") == {"device_id": torch.device("cuda", 3)}
    assert recording._init_options("gloo") == {}


class _FakeNCCL:
    """What the recording backend asks of ``dist.ProcessGroupNCCL``: options, the constructor, eager connection."""

    made: list = []

    class Options:
        pass

    def __init__(self, store, rank, size, options):
        self.rank, self.size, self.options, self.connected = rank, size, options, []
        _FakeNCCL.made.append(self)

    def eager_connect_single_device(self, device):
        self.connected.append(device)


def test_every_nccl_group_connects_its_communicator_on_the_ranks_device_when_it_is_made(monkeypatch):
    monkeypatch.setattr(dist, "ProcessGroupNCCL", _FakeNCCL, raising=False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    options = type("BackendOptions", (), {"store": None, "group_rank": 0, "group_size": 2, "timeout": 5,
                                          "global_ranks_in_group": [2, 3], "group_id": "7"})()
    group = recording._creator("nccl")(options, None)
    inner = _FakeNCCL.made[-1]
    assert inner.connected == [torch.device("cuda", 1)]
    assert inner.options.global_ranks_in_group == [2, 3] and inner.options.group_name == "7"
    assert group._get_backend(torch.device("cuda", 1)) is inner


def test_object_collectives_on_a_recording_nccl_group_use_its_device_not_the_cpu():
    cuda_group = recording.RecordingProcessGroup(object(), 0, 2, [0, 1], "cuda")
    gloo_group = recording.RecordingProcessGroup(object(), 0, 2, [0, 1], "cpu")
    assert distributed_c10d._get_object_coll_device(cuda_group) == "cuda"
    assert distributed_c10d._get_object_coll_device(gloo_group) == "cpu"


class _Done:
    def __init__(self, works):
        self.works = works

    def wait(self, timeout=None):
        for work in self.works:
            work.wait()
        return True


class _CoalescingShim:
    """gloo behind what NCCL offers: ``supports_coalescing``, and start/end brackets (logged)."""

    supports_coalescing = True

    def __init__(self, inner):
        self.inner, self.log, self._works = inner, [], None

    def _start_coalescing(self, device):
        self.log.append("start")
        self._works = []

    def _end_coalescing(self, device):
        self.log.append("end")
        works, self._works = self._works, None
        return _Done(works)

    def send(self, tensors, dst, tag):
        self.log.append(f"send {dst}")
        work = self.inner.send(tensors, dst, tag)
        self._works.append(work)
        return work

    def recv(self, tensors, src, tag):
        self.log.append(f"recv {src}")
        work = self.inner.recv(tensors, src, tag)
        self._works.append(work)
        return work


def _ring_batched():
    recording.install()
    group = distributed_c10d._get_default_group()
    assert type(group) is not dist.ProcessGroup  # torch alone would not coalesce here
    shim = group._inner = _CoalescingShim(group._inner)
    rank, size = dist.get_rank(), dist.get_world_size()
    send, received = torch.full((4,), float(rank)), torch.empty(4)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % size), dist.P2POp(dist.irecv, received, (rank - 1) % size)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    return received.tolist(), shim.log, recording.summary(recording.since(0))


def test_a_batched_ring_on_a_recording_group_is_coalesced_like_nccls_and_every_message_is_recorded():
    results = labutils.launch(_ring_batched, 2, backend="gloo", timeout=60)
    for rank, (received, log, (calls, sizes)) in enumerate(results):
        assert received == [float((rank - 1) % 2)] * 4
        assert log == ["start", f"send {(rank + 1) % 2}", f"recv {(rank - 1) % 2}", "end"]
        assert calls == {"send": 1, "recv": 1} and sizes == {"send": 16, "recv": 16}


# ----- collectives NCCL runs also run on the judge's gloo group -----------------------------------------

def _stacked_collectives():
    recording.install()
    rank, size = dist.get_rank(), dist.get_world_size()
    gathered = torch.empty(size, 3, 2)
    dist.all_gather_into_tensor(gathered, torch.full((3, 2), float(rank)))
    reduced = torch.empty(3, 2)
    dist.reduce_scatter_tensor(reduced, torch.ones(size, 3, 2) * (rank + 1))
    return gathered[:, 0, 0].tolist(), reduced.sum().item(), recording.summary(recording.since(0))


def test_all_gather_into_tensor_and_reduce_scatter_tensor_take_a_stacked_tensor_on_the_judges_gloo_group():
    results = labutils.launch(_stacked_collectives, 2, backend="gloo", timeout=60)
    for gathered, reduced, (calls, sizes) in results:
        assert gathered == [0.0, 1.0] and reduced == 6 * 3.0
        assert calls == {"all_gather": 1, "reduce_scatter": 1}
        assert sizes == {"all_gather": 24, "reduce_scatter": 48}


# ----- grading workers on GPUs of their own --------------------------------------------------------------

def test_four_grading_workers_on_an_eight_gpu_node_get_two_disjoint_gpus_each():
    from labutils.devices.cuda_visible import VisibleDevice

    from grading.autograder.judge_service import worker_gpus

    node = [VisibleDevice(ordinal, ordinal) for ordinal in range(8)]
    assert worker_gpus(4, node) == ["0,1", "2,3", "4,5", "6,7"]
    assert worker_gpus(2, node) == ["0,1,2,3", "4,5,6,7"]
    slurm_share = [VisibleDevice(ordinal, index) for ordinal, index in enumerate([4, 5, 6, 7])]  # CUDA_VISIBLE_DEVICES=4,5,6,7
    assert worker_gpus(2, slurm_share) == ["4,5", "6,7"]
    assert worker_gpus(3, []) == [None, None, None]  # a CPU node: the variable is left alone


def test_each_workers_judge_process_starts_with_that_workers_gpus(monkeypatch, tmp_path):
    from grading.autograder import judge_service

    started = []

    class Popen:
        def __init__(self, argv, **kwargs):
            started.append(kwargs["env"])

        def poll(self):
            return 0

    monkeypatch.setattr(judge_service.subprocess, "Popen", Popen)
    monkeypatch.setattr(judge_service.tempfile, "tempdir", str(tmp_path))  # its ranks' folder, removed with tmp_path
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    judge_service.JudgeService(str(tmp_path / "judge.log"), 30.0, visible_devices="6,7")
    judge_service.JudgeService(str(tmp_path / "judge.log"), 30.0)
    assert started[0]["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert started[1]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_grading_on_nccl_with_too_few_gpus_per_worker_is_refused_before_any_work(monkeypatch):
    from labutils.devices import backend as labutils_backend
    from labutils.devices.cuda_visible import VisibleDevice

    from grading.cli import UsageError

    monkeypatch.setattr(labutils_backend, "visible_cuda_devices", lambda: [VisibleDevice(i, i) for i in range(8)])
    grade._check_gpus_per_worker("nccl", 2)  # 4 GPUs each: fine
    grade._check_gpus_per_worker("gloo", 8)  # gloo needs none
    with pytest.raises(UsageError, match="use --workers 2"):
        grade._check_gpus_per_worker("nccl", 4)


_STACKED_GATHER = '''
class _GatherStacked(torch.autograd.Function):
    """All-gather of the last dimension through one all_gather_into_tensor into a (tp, ...) tensor."""

    @staticmethod
    def forward(ctx, y, group):
        ctx.group = group
        stacked = y.new_empty((dist.get_world_size(group),) + tuple(y.shape))
        dist.all_gather_into_tensor(stacked, y.contiguous(), group=group)
        return torch.cat(stacked.unbind(0), dim=-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.chunk(dist.get_world_size(ctx.group), dim=-1)[dist.get_rank(ctx.group)].contiguous(), None


class ColumnParallelLinear(ColumnParallelLinear):
    def forward(self, x):
        y = F.linear(copy_to_tp_region(x, self.group), self.weight, self.bias)
        return _GatherStacked.apply(y, self.group) if self.gather_output else y
'''


def test_a_correct_lab1_answer_that_gathers_into_a_stacked_tensor_keeps_its_part_on_the_judges_gloo():
    from graded_lab import GradedLab

    from grading.judge import client, engine

    lab = "lab01_tensor_parallel"
    namespace = GradedLab(lab, rank_timeout_s=30.0, given_cells=("setup", "check_helpers", "given_mappings")
                          ).solution_namespace()
    exec(_STACKED_GATHER, namespace)
    objects = {"ColumnParallelLinear": namespace["ColumnParallelLinear"]}
    verdict = engine.run_test(lab, "test_column_parallel", list(objects), client.dumps(objects), {},
                              rank_timeout_s=30, backend="gloo", seed=2)
    assert verdict.passed, verdict.lines
