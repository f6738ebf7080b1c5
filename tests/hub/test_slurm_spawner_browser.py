"""A student's server spawned through batchspawner's SlurmSpawner on the tests' one-node Slurm
cluster (``tests/slurm_cluster.py``), logged into and opened in headless Chromium: the course
hub with ``spawner = "slurm"`` (``grading/hub/slurm_spawner.py``), its GPU policy as the job's
GRES request, the server's process holding the GPU Slurm gave its job."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import headless_chromium
import pytest
from course_hub import SHARED, SYSTEM_PYTHON, Hub, hub_workdir, log_in, started

from slurm_cluster import PARTITION, SlurmCluster, missing

pytestmark = [pytest.mark.hub, pytest.mark.slow, pytest.mark.timeout(900)]

SERVER_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def slurm():
    why = missing()
    if why:
        pytest.skip(why)
    folder = tempfile.mkdtemp(prefix="course-slurm-", dir="/var/tmp")  # the students' jobs read it
    try:
        with SlurmCluster(folder) as cluster:
            yield cluster
    finally:
        shutil.rmtree(folder, ignore_errors=True)


#: The account of this test's student (its own, so it never meets another hub test's accounts).
STUDENT = "cslurmstudent"


@pytest.fixture(scope="module")
def student():
    """{STUDENT: password}: a throwaway Unix account, removed afterwards with what it left running."""
    subprocess.run(["userdel", "-r", STUDENT], capture_output=True)
    subprocess.run(["useradd", "-m", "-s", "/bin/bash", STUDENT], check=True)
    password = secrets.token_urlsafe(12)
    subprocess.run(["chpasswd"], input=f"{STUDENT}:{password}", text=True, check=True)
    yield {STUDENT: password}
    subprocess.run(["pkill", "-KILL", "-u", STUDENT], capture_output=True)
    subprocess.run(["userdel", "-r", STUDENT], capture_output=True)


@pytest.fixture(scope="module")
def slurm_hub(hub_installed, student, slurm):
    """The course hub as `course hub` starts it, with every server a Slurm job."""
    workdir = hub_workdir("course-hub-slurm-")
    hub = Hub(workdir, student)
    hub.config.write_text(
        f'course_id = "multigpu"\nip = "127.0.0.1"\nport = {hub.port}\nexchange = "{hub.exchange}"\n'
        f'shared = "{SHARED}"\npython = "{SYSTEM_PYTHON}"\nclass_dir = "{hub.class_dir}"\n'
        f'students = ["{STUDENT}"]\ninstructors = []\nspawner = "slurm"\n'
        '[gpus]\npolicy = "round_robin"\nper_student = 1\n'
        f'[slurm]\npartition = "{PARTITION}"\ngpu_type = "fake"\ntime = "00:20:00"\n'
        'hub_ip = "127.0.0.1"\nhub_connect_ip = "127.0.0.1"\nstart_timeout = 200\n')
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = slurm.conf  # the hub's sbatch, squeue and scancel reach the test cluster
    try:
        with started(hub):
            yield hub
    finally:
        os.environ.pop("SLURM_CONF") if previous is None else os.environ.update(SLURM_CONF=previous)
        shutil.rmtree(workdir, ignore_errors=True)


def _server_jobs(slurm, user: str) -> list:
    out = subprocess.run(["squeue", "-h", "-u", user, "-o", "%i %T %j"], env=slurm.env, capture_output=True,
                         text=True, timeout=60).stdout
    return [line.split() for line in out.splitlines()]


def _server_environment(user: str) -> dict:
    """The environment of ``user``'s jupyterhub-singleuser process."""
    uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True).stdout)
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if "singleuser" in cmdline:
                raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        except OSError:
            continue
    return {}


def test_a_students_server_is_a_slurm_job_with_its_gpu_and_opens_in_the_browser(slurm_hub, slurm):
    from playwright.sync_api import sync_playwright

    student = STUDENT
    with sync_playwright() as playwright:
        chromium = headless_chromium.launch(playwright)
        try:
            page = chromium.new_page()
            log_in(page, slurm_hub.url, student, slurm_hub.passwords[student])
            page.wait_for_selector(".jp-LauncherCard", timeout=SERVER_TIMEOUT_MS)
            assert page.url.startswith(f"{slurm_hub.url}/user/{student}/lab")
        finally:
            chromium.close()
    jobs = _server_jobs(slurm, student)
    assert len(jobs) == 1 and jobs[0][1] == "RUNNING" and jobs[0][2] == "spawner-jupyterhub", jobs
    shown = subprocess.run(["scontrol", "show", "job", jobs[0][0]], env=slurm.env, capture_output=True, text=True).stdout
    assert "gres:gpu:fake:1" in shown and f"Partition={PARTITION}" in shown, shown
    deadline = time.monotonic() + 30
    while not (env := _server_environment(student)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert env.get("CUDA_VISIBLE_DEVICES") == "0" and env.get("SLURM_JOB_ID") == jobs[0][0], env
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0] == str(SHARED / "config" / "student_config")
    assert env["COURSE_EXCHANGE"] == str(slurm_hub.exchange)
