"""Under torchrun (faked 8-GPU nodes): one backend for the whole job, decided by rank 0."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from fakegpu import FakeGpuNode, h100s

from labutils.ranks import multinode
from labutils.command.usage import UsageError

pytestmark = pytest.mark.fakegpu


#: the prefix ``multinode.attempt_store`` gives every key on torchrun's first attempt
ATTEMPT = "labutils/attempt_0/"


class FakeStore(dist.Store):
    """The job's rendezvous store: ``get`` of a key nobody set would block forever, so it fails.
    ``published``: what rank 0 of the first attempt set (keys as ``multinode`` names them)."""

    def __init__(self, published=None):
        super().__init__()
        self.values = {ATTEMPT + key: value for key, value in (published or {}).items()}

    def set(self, key, value):
        self.values[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        if key not in self.values:
            raise AssertionError(f"{key} was never published: this rank would wait forever")
        return self.values[key]


def torchrun_rank(monkeypatch, rank, store, local_world=8):
    """This process as torchrun's ``rank`` on a node of ``local_world`` ranks; returns what it initialised."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in {"RANK": str(rank), "WORLD_SIZE": "16", "LOCAL_RANK": str(rank % local_world),
                        "LOCAL_WORLD_SIZE": str(local_world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    calls = {}
    monkeypatch.setattr(dist, "rendezvous", lambda url, **kw: iter([(store, rank, 16)]))
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.setdefault("set_device", device))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **options: calls.update(init=(backend, options)))
    monkeypatch.setattr("labutils.rank.configure", lambda device, backend: calls.update(configure=(device, backend)))
    calls["device"] = multinode.init_from_environment("auto")
    return calls


def test_multinode_binds_nccl_to_the_local_gpu(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8))
    calls = torchrun_rank(monkeypatch, 3, FakeStore({multinode.BACKEND_KEY: b"nccl"}))
    assert calls["device"] == torch.device("cuda", 3) and calls["set_device"] == torch.device("cuda", 3)
    backend, options = calls["init"]
    assert backend == "nccl" and options["device_id"] == torch.device("cuda", 3) and options["rank"] == 3
    assert calls["configure"] == (torch.device("cuda", 3), "nccl")


def test_rank_zero_decides_auto_and_publishes_it_so_the_job_cannot_mix_gloo_and_nccl(monkeypatch):
    node = FakeGpuNode(monkeypatch, h100s(8))
    store = FakeStore()
    assert torchrun_rank(monkeypatch, 0, store)["init"][0] == "nccl"
    assert store.values[ATTEMPT + multinode.BACKEND_KEY] == b"nccl" and node.probe_runs == 1


def test_other_ranks_follow_rank_zero_without_their_own_slow_cuda_probe(monkeypatch):
    # CUDA would not initialise on this node (the probe would say gloo), but rank 0 chose NCCL:
    node = FakeGpuNode(monkeypatch, h100s(8), cuda_init_error="RuntimeError: CUDA error 802")
    calls = torchrun_rank(monkeypatch, 9, FakeStore({multinode.BACKEND_KEY: b"nccl"}))
    assert calls["init"][0] == "nccl" and node.probe_runs == 0


def test_rank_zero_falling_back_to_gloo_takes_every_rank_to_gloo_even_with_gpus(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(8))
    calls = torchrun_rank(monkeypatch, 5, FakeStore({multinode.BACKEND_KEY: b"gloo"}))
    assert calls["init"][0] == "gloo" and calls["device"] == torch.device("cpu") and "set_device" not in calls


def test_a_node_with_too_few_gpus_for_rank_zeros_nccl_fails_at_once_instead_of_hanging(monkeypatch):
    FakeGpuNode(monkeypatch, h100s(4))
    with pytest.raises(UsageError, match="rank 0 chose NCCL .* 4 GPU\\(s\\) for 8 local ranks"):
        torchrun_rank(monkeypatch, 8, FakeStore({multinode.BACKEND_KEY: b"nccl"}))
