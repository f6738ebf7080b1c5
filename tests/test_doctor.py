"""labutils doctor: the environment report, as text and as JSON."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from labutils.command import cli, doctor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_doctor(*args: str) -> subprocess.CompletedProcess:
    """`python -m labutils doctor ...` with every GPU hidden, so backend="auto" must pick gloo."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    return subprocess.run(
        [sys.executable, "-m", "labutils", "doctor", *args],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=120,
    )


def test_doctor_prints_the_environment_and_why_gloo():
    done = run_doctor()
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("Python", "torch", "CUDA", "NCCL", "gloo", "GPUs", "Topology", "Backend", "CPU", "Packages"):
        assert label in out
    for world_size in doctor.WORLD_SIZES:
        assert f"auto with {world_size} ranks -> gloo (gloo on CPU: no CUDA GPU visible)" in out
    for package in doctor.PACKAGES:
        assert package in out


def test_doctor_json_is_the_environment_dict():
    done = run_doctor("--json")
    assert done.returncode == 0, done.stderr
    env = json.loads(done.stdout)
    assert set(env) == {
        "python", "platform", "torch", "gpus", "topology", "topology_reason", "cuda_probe", "gpu_mask", "backend", "cpu",
        "cuda_build_mismatch", "compute_modes",
        "packages",
    }
    assert env["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    assert env["backend"]["2"] == {"backend": "gloo", "device_type": "cpu", "reason": "gloo on CPU: no CUDA GPU visible"}
    assert env["gpus"]["visible"] == 0 and env["torch"]["gloo"] is True
    assert env["cpu"]["logical_cpus"] >= 1 and set(env["packages"]) == set(doctor.PACKAGES)


def test_environment_in_process_matches_cli(capsys):
    env = doctor.environment()
    json.dumps(env)  # JSON-ready
    assert cli.main(["doctor", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["packages"] == env["packages"] and printed["backend"].keys() == env["backend"].keys()
    if not env["torch"]["cuda_available"]:
        assert env["torch"]["nccl"] is None  # asked only when CUDA is there


def test_package_versions():
    versions = doctor.package_versions(["pytest", "no-such-distribution-for-labutils"])
    assert versions["no-such-distribution-for-labutils"] == "not installed"
    assert versions["pytest"][0].isdigit()


def test_environment_text_shows_gpus_and_topology():
    env = doctor.environment()
    env["gpus"].update(count=1, visible=1, driver="580.159.04", cuda_driver="13.0", reason=None, devices=[{
        "index": 0, "cuda": "cuda:0", "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85_899_345_920,
        "compute_capability": "9.0", "pci_bus_id": "0000:18:00.0", "pcie_max": "Gen5 x16",
        "pcie_current": "Gen5 x16", "nvlinks_up": 18, "numa_node": 0, "cpus": "0-55",
        "mig_enabled": False, "mig_devices": [],
    }])
    env["topology"] = ["1 GPU, no NIC", "single GPU (GPU0): no GPU-to-GPU link"]
    text = doctor.environment_text(env)
    assert "GPUs        1 (driver 580.159.04, supports CUDA 13.0; 1 visible to CUDA)" in text
    assert "GPU0 [cuda:0] NVIDIA H100 80GB HBM3, 85.9 GB (80.0 GiB), compute capability 9.0, PCIe Gen5 x16" in text
    assert "Topology    1 GPU, no NIC\n            single GPU (GPU0)" in text


def test_environment_text_without_torch():
    env = doctor.environment()
    env["torch"] = {"torch": "not installed", "cuda": None, "cuda_available": False, "nccl": None, "gloo": False}
    text = doctor.environment_text(env)
    assert "torch       not installed" in text and "unknown (torch not installed)" in text


def test_doctor_says_which_gpus_the_hub_assigned(monkeypatch):
    from labutils.command.doctor import gpu_mask, gpu_mask_text

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert "not set: every GPU" in gpu_mask_text(gpu_mask())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    monkeypatch.setenv("JUPYTERHUB_USER", "ana")
    monkeypatch.setenv("COURSE_GPU_POLICY", "round_robin")
    assert gpu_mask_text(gpu_mask()) == ("CUDA_VISIBLE_DEVICES=GPU-1234 (set by the course hub for ana "
                                         "(policy round_robin)): ranks see these, as cuda:0, cuda:1, ...")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "empty by the course hub for ana" in gpu_mask_text(gpu_mask()) and "gloo" in gpu_mask_text(gpu_mask())
