"""The NCCL paths of the launcher: run on a GPU node (skipped, with the reason, elsewhere)."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import labutils
from labutils.devices.backend import BackendUnavailableError, choose_backend, visible_gpu_count

pytestmark = pytest.mark.usefixtures("no_leftover_processes")
GPUS = visible_gpu_count()


def _rank_device_and_sum():
    device = labutils.rank.device()
    t = torch.ones(1, device=device) * dist.get_rank()
    dist.all_reduce(t)
    return str(device), dist.get_backend(), t


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU (none visible)")
def test_nccl_single_gpu_launch():
    [(device, backend, t)] = labutils.launch(_rank_device_and_sum, 1, backend="nccl")
    assert device == "cuda:0" and backend == "nccl"
    assert t.device.type == "cpu" and t.item() == 0.0


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU (none visible)")
def test_cuda_results_come_back_on_the_cpu_in_any_container():
    def results():
        layer = torch.nn.Linear(2, 2, device=labutils.rank.device())
        return {"state": layer.state_dict(), "layer": layer, "nested": [(layer.weight * 2,)]}

    [r] = labutils.launch(results, 1, backend="nccl")
    tensors = [*r["state"].values(), r["layer"].weight, r["nested"][0][0]]
    assert all(t.device.type == "cpu" for t in tensors)
    assert isinstance(r["layer"].weight, torch.nn.Parameter)


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 CUDA GPUs ({GPUS} visible)")
def test_auto_picks_nccl_with_one_gpu_per_rank():
    n = min(GPUS, 4)
    assert choose_backend("auto", n).backend == "nccl"
    results = labutils.launch(_rank_device_and_sum, n)
    assert [d for d, _, _ in results] == [f"cuda:{r}" for r in range(n)]
    assert all(b == "nccl" and t.item() == sum(range(n)) for _, b, t in results)


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 CUDA GPUs ({GPUS} visible)")
def test_nccl_hang_times_out_and_pool_recovers():
    def skip_on_rank_0():
        if dist.get_rank() != 0:
            dist.all_reduce(torch.ones(1, device=labutils.rank.device()))
        torch.cuda.synchronize()

    with labutils.Pool(2, backend="nccl") as pool:
        with pytest.raises(labutils.RankTimeoutError) as info:
            pool.run(skip_on_rank_0, timeout=5)
        assert info.value.ranks == [1]
        assert pool.run(dist.get_rank) == [0, 1]


def test_auto_falls_back_to_gloo_with_too_few_gpus():
    choice = choose_backend("auto", 4, gpu_count=2)
    assert choice.backend == "gloo" and "4 ranks asked but only 2 GPU(s) visible" in choice.reason
    assert choose_backend("auto", 2, gpu_count=0).reason == "gloo on CPU: no CUDA GPU visible"


def test_explicit_nccl_with_too_few_gpus_says_what_to_do():
    with pytest.raises(BackendUnavailableError, match="4 ranks asked, 2 GPUs visible. Use at most 2 ranks"):
        choose_backend("nccl", 4, gpu_count=2)
    with pytest.raises(BackendUnavailableError, match="no CUDA GPU is visible here .* backend='gloo'"):
        choose_backend("nccl", 1, gpu_count=0)


def _cpu_tensor_reduce():
    dist.all_reduce(torch.ones(1))


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU (none visible)")
def test_a_cpu_tensor_on_nccl_says_to_use_the_rank_device(monkeypatch):
    monkeypatch.delenv("LABUTILS_STRICT_COLLECTIVES", raising=False)  # NCCL's own error, not the strict check's
    with pytest.raises(Exception) as info:
        labutils.launch(_cpu_tensor_reduce, 1, backend="nccl")
    assert any("labutils.rank.device()" in note for note in getattr(info.value, "__notes__", []))


def _fails():
    raise ValueError("on purpose")


@pytest.mark.gpu
@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU (none visible)")
def test_a_failed_nccl_call_retires_the_ranks():
    with labutils.Pool(1, backend="nccl") as pool:
        pool.run(dist.get_rank)
        first = pool.pids()
        with pytest.raises(ValueError):
            pool.run(_fails)
        pool.run(dist.get_rank)
        assert pool.pids() != first


def _timed_step_of_uneven_ranks():
    from labutils.measure import bench

    device = labutils.rank.device()
    size = 256 if dist.get_rank() == 0 else 4096          # rank 1's step is much slower than rank 0's
    a, grads = torch.randn(size, size, device=device), torch.ones(2**20, device=device)

    def step():
        a @ a
        dist.all_reduce(grads)

    return bench.time_iterations(step, device, iters=5, warmup=1, group=dist.group.WORLD).calls_per_sample


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 CUDA GPUs ({GPUS} visible)")
def test_a_timed_step_with_collectives_agrees_on_its_batch_across_nccl_ranks():
    calls = labutils.launch(_timed_step_of_uneven_ranks, 2, backend="nccl", timeout=120)
    assert calls[0] == calls[1]


def _tensor_on_cuda0():
    dist.all_reduce(torch.ones(1, device="cuda:0"))


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason=f"needs at least 2 CUDA GPUs ({GPUS} visible)")
def test_strict_mode_names_a_tensor_on_another_ranks_gpu(monkeypatch):
    from labutils.ranks.strict import CollectiveDeviceError

    monkeypatch.setenv("LABUTILS_STRICT_COLLECTIVES", "1")
    with pytest.raises(CollectiveDeviceError, match="cuda:0, but this rank's device is cuda:1"):
        labutils.launch(_tensor_on_cuda0, 2, backend="nccl", timeout=60)
