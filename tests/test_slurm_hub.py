"""The hub on Slurm (``grading/hub/slurm_spawner.py``): course_hub.toml's ``spawner = "slurm"``
selects batchspawner's SlurmSpawner, the GPU policy becomes the job's GRES request, and a
student's server job, submitted by batchspawner itself on the real one-node cluster
(``slurm_cluster``), runs with the GPUs Slurm gave it and the single-node hub's environment.

What is not run here: the JupyterHub process and the browser. The job runs a probe in place of
``batchspawner-singleuser`` (which would call back to a running hub), through the same
batch script, submission, status queries and cancellation as a real server.
"""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from grading.hub import shared, start
from grading.hub.slurm_spawner import gres_request
from slurm_cluster import NODE, PARTITION

batchspawner = pytest.importorskip("batchspawner", reason="batchspawner is installed by make slurm-deps")


def _config(tmp_path, monkeypatch, extra: str, students=("root",)):
    """JupyterHub's configuration from jupyterhub_config.py for a course_hub.toml ending in ``extra``."""
    from traitlets.config.loader import PyFileConfigLoader

    settings = tmp_path / "course_hub.toml"
    settings.write_text(f"students = {list(students)!r}\ninstructors = [\"ivy\"]\nexchange = \"{tmp_path / 'x'}\"\n"
                        f"shared = \"{tmp_path / 'shared'}\"\n" + extra)
    for name, value in {"COURSE_HUB_CONFIG": settings, "COURSE_HUB_STATE": tmp_path, "COURSE_HUB_PYTHON": sys.executable,
                        "COURSE_HUB_PROXY": "configurable-http-proxy"}.items():
        monkeypatch.setenv(name, str(value))
    return PyFileConfigLoader("jupyterhub_config.py", path=str(Path(start.__file__).parent)).load_config()


SLURM_HUB = ('spawner = "slurm"\n[gpus]\npolicy = "blocks"\nper_student = 1\n'
             f'[slurm]\npartition = "{PARTITION}"\ngpu_type = "fake"\ntime = "00:10:00"\n')


def test_the_single_node_hub_stays_the_default(tmp_path, monkeypatch):
    config = _config(tmp_path, monkeypatch, "")
    assert "spawner_class" not in config.JupyterHub and "SlurmSpawner" not in config


def test_spawner_slurm_selects_batchspawner_with_the_policy_as_gres(tmp_path, monkeypatch):
    config = _config(tmp_path, monkeypatch, SLURM_HUB)
    assert config.JupyterHub.spawner_class == "batchspawner.SlurmSpawner"
    assert config.SlurmSpawner.req_partition == PARTITION and config.SlurmSpawner.req_gres == "gpu:fake:1"
    servers_python = shared.python(tmp_path / "shared")  # the students' environment, never the checkout's
    assert config.SlurmSpawner.batchspawner_singleuser_cmd == str(servers_python.parent / "batchspawner-singleuser")
    with pytest.raises(ValueError, match="needs \\[slurm\\] partition"):
        _config(tmp_path, monkeypatch, 'spawner = "slurm"\n')
    with pytest.raises(ValueError, match="spawner must be one of local, slurm"):
        _config(tmp_path, monkeypatch, 'spawner = "kubernetes"\n')


def test_gpu_policies_become_gres_requests():
    assert gres_request({"policy": "blocks", "per_student": 2}, {}) == "gpu:2"
    assert gres_request({"policy": "round_robin", "per_student": 1}, {"gpu_type": "a100"}) == "gpu:a100:1"
    assert gres_request({"policy": "mig"}, {"mig_type": "1g.10gb"}) == "gpu:1g.10gb:1"
    with pytest.raises(ValueError, match="mig_type"):
        gres_request({"policy": "mig"}, {})
    with pytest.raises(ValueError, match="at least 1"):
        gres_request({"policy": "blocks", "per_student": 0}, {})
    with pytest.raises(ValueError, match="unknown GPU policy"):
        gres_request({"policy": "random"}, {})


#: Stands in for batchspawner-singleuser: writes the job's environment, then serves until cancelled.
PROBE = "bash -c 'env > {out}.tmp && mv {out}.tmp {out} && exec sleep 600' probe"


def _spawner(config, home: Path, probe_out: Path):
    from jupyterhub.objects import Hub

    user = SimpleNamespace(name="root", url="/user/root/", escaped_name="root", id=1, server=None)
    spawner = batchspawner.SlurmSpawner(config=config, user=user, hub=Hub(), api_token="token", oauth_client_id="c")
    config.Spawner.pre_spawn_hook(spawner)  # what the hub runs before it starts the server
    spawner.req_homedir = str(home)  # the job's folder and output file
    spawner.batchspawner_singleuser_cmd = PROBE.format(out=probe_out)
    return spawner


async def _until(condition, timeout_s: float = 120.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)


def test_a_students_server_job_gets_its_gpu_and_the_hubs_environment(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", slurm.conf)  # the hub's: its sbatch, squeue and scancel reach the test cluster
    config = _config(tmp_path, monkeypatch, SLURM_HUB)
    probe = tmp_path / "server-env.txt"
    spawner = _spawner(config, tmp_path, probe)

    async def running() -> bool:
        await spawner.query_job_status()
        return spawner.state_isrunning()

    async def gone() -> bool:
        return subprocess.run(["squeue", "-h", "-j", spawner.job_id], capture_output=True, text=True).stdout.strip() == ""

    async def scenario() -> None:
        assert await spawner.submit_batch_script()
        await _until(running, what="the server's job to run")
        assert spawner.state_gethost() == NODE
        await _until(lambda: asyncio.sleep(0, probe.exists()), what="the probe's environment file")
        await spawner.cancel_batch_job()
        await _until(gone, what="the cancelled job to leave the queue")

    asyncio.run(scenario())
    env = dict(line.split("=", 1) for line in probe.read_text().splitlines() if "=" in line)
    assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["SLURM_GPUS_ON_NODE"] == "1"
    assert env["SLURM_JOB_PARTITION"] == PARTITION
    assert env["COURSE_EXCHANGE"] == str(tmp_path / "x") and env["COURSE_GPU_POLICY"] == "blocks"
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(tmp_path / "shared" / "config" / "student_config")
    assert env["JUPYTERHUB_API_TOKEN"] == "token" and env["JUPYTERHUB_USER"] == "root"
