"""A site's NCCL settings and a GPU node's device files meet the sandbox (grading.autograder.sandbox):
every ``NCCL_*`` variable of the site is dropped and loopback settings put in its place (the kernels',
the judge's and its ranks'), /etc/nccl.conf reads empty inside, /sys is there read-only, and the
NVIDIA device files are found at each start (faked here by bwrap argument inspection, and by a real
sandbox that reads its environment and the masked file)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grading.autograder import sandbox
from grading.autograder.judge_service import judge_environment
from grading.autograder.sandbox import (NCCL_SANDBOX, SandboxSpec, find_bwrap, judge_rank_wrapper,
                                        kernel_environment, nccl_environment, sandbox_command, submission_spec)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SITE = {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_NET": "IB", "NCCL_TOPO_FILE": "/home/site/topo.xml",
        "NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO", "PATH": os.environ["PATH"]}
needs_bwrap = pytest.mark.skipif(sandbox.shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _spec(tmp_path, gpu=False) -> SandboxSpec:
    spec = submission_spec(str(tmp_path / "sandboxes"), "alice", REPO, "", 0, on_gpu=gpu)
    workdir, scratch = tmp_path / "work", tmp_path / "scratch"
    for folder in (workdir, scratch, tmp_path / "sandboxes" / "alice" / "runtime"):
        folder.mkdir(parents=True, exist_ok=True)
    return SandboxSpec(**{**spec.__dict__, "workdir": str(workdir), "scratch_dir": str(scratch)})


def test_site_nccl_variables_are_replaced_by_loopback_settings():
    env = nccl_environment(SITE)
    assert {k: v for k, v in env.items() if k.startswith("NCCL_")} == {**NCCL_SANDBOX, "NCCL_DEBUG": "INFO"}
    assert env["NCCL_SOCKET_IFNAME"] == "lo" and "NCCL_NET" not in env and "NCCL_TOPO_FILE" not in env
    judged = judge_environment(SITE)  # each judge's rank takes this environment again as it starts
    assert judged["NCCL_SOCKET_IFNAME"] == "lo" and "NCCL_TOPO_FILE" not in judged


def test_the_kernels_command_sets_loopback_nccl_binds_sys_and_masks_nccl_conf(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox.os.path, "exists", lambda p, exists=os.path.exists: p == "/etc/nccl.conf" or exists(p))
    argv = sandbox_command("bwrap", _spec(tmp_path), ["python"], kernel_environment(SITE))
    pairs = list(zip(argv, argv[1:], argv[2:]))
    assert ("--setenv", "NCCL_SOCKET_IFNAME", "lo") in pairs and ("--setenv", "NCCL_NET", "IB") not in pairs
    assert ("--ro-bind", "/sys", "/sys") in pairs
    assert ("--dev-bind", os.devnull, "/etc/nccl.conf") in pairs


def test_gpu_device_files_are_found_at_each_start_not_once(tmp_path, monkeypatch):
    found = [["/dev/nvidia0", "/dev/nvidiactl"]]
    monkeypatch.setattr(sandbox, "gpu_devices", lambda: found[0])
    spec = _spec(tmp_path, gpu=True)
    first = sandbox_command("bwrap", spec, ["python"], {})
    found[0] = ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]  # created later
    second = sandbox_command("bwrap", spec, ["python"], {})
    assert "/dev/nvidia-uvm" not in first
    assert [w for w in second if w.startswith("/dev/nvidia")] == [d for d in found[0] for _ in (0, 1)]
    assert "/dev/nvidia0" not in sandbox_command("bwrap", _spec(tmp_path, gpu=False), ["python"], {})


def test_the_judges_wrapper_finds_the_devices_when_each_template_starts(tmp_path):
    wrapper = judge_rank_wrapper("bwrap", REPO, str(tmp_path), 0, on_gpu=True)
    assert sandbox.DEVICES_PLACEHOLDER in wrapper and "/dev/nvidiactl" not in wrapper
    assert sandbox.DEVICES_PLACEHOLDER not in judge_rank_wrapper("bwrap", REPO, str(tmp_path), 0, on_gpu=False)
    assert "glob.glob('/dev/nvidia*')" in sandbox.STAGE_CODE


@pytest.fixture
def site_conf(monkeypatch):
    """A site's NCCL configuration file where the sandbox would show it (this environment's folder,
    bound read-only inside), standing for /etc/nccl.conf."""
    path = os.path.join(sys.prefix, "nccl-site-test.conf")
    with open(path, "w") as f:
        f.write("NCCL_SOCKET_IFNAME=ib0\n")
    monkeypatch.setattr(sandbox, "NCCL_CONF", path)
    yield path
    os.unlink(path)


@needs_bwrap
@pytest.mark.parametrize("masked", [True, False])
def test_inside_a_real_sandbox_nccl_reads_loopback_settings_and_an_empty_conf_and_sys_is_read_only(
        tmp_path, site_conf, monkeypatch, masked):
    if not masked:  # the control: without the mask the site's file shows through
        monkeypatch.setattr(sandbox, "NCCL_CONF", "/no/such/nccl.conf")
    code = ("import json, os; print(json.dumps({'env': {k: v for k, v in os.environ.items() if k.startswith('NCCL_')},"
            f" 'conf': open({site_conf!r}).read(),"
            " 'sys': os.path.isdir('/sys/devices'), 'writable': os.access('/sys/devices', os.W_OK)}))")
    argv = sandbox_command(find_bwrap(), _spec(tmp_path), [sys.executable, "-c", code], kernel_environment(SITE))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["env"] == {**NCCL_SANDBOX, "NCCL_DEBUG": "INFO"}
    assert seen["conf"] == ("" if masked else "NCCL_SOCKET_IFNAME=ib0\n")
    assert seen["sys"] and not seen["writable"]
