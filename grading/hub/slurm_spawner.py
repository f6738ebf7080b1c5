"""The course's JupyterHub on a Slurm cluster: each server is a Slurm job (batchspawner's
``SlurmSpawner``), selected by ``spawner = "slurm"`` in ``course_hub.toml``.

    spawner = "slurm"
    exchange = "/shared/nbgrader/exchange"   # on the cluster's shared filesystem
    [gpus]
    policy = "blocks"                        # or "round_robin" (the same on Slurm), or "mig"
    per_student = 1
    [slurm]
    partition = "gpu"
    time = "04:00:00"                        # --time of a server's job
    memory = "32G"                           # --mem (optional)
    cpus = 8                                 # --cpus-per-task (optional)
    gpu_type = "a100"                        # GRES type of whole GPUs (optional: any)
    mig_type = "1g.10gb"                     # GRES type of a MIG slice (policy "mig")
    options = "--account=course"             # more sbatch options (optional)
    hub_connect_ip = "login1"                # where the nodes reach the hub (default: this host's name)
    exec_prefix = "sudo -E -u {username}"    # how the hub submits as the student (default: runuser, as root)

The GPU policy becomes the job's GRES request (``gres_request``): N whole GPUs per student
(``gpu:N`` or ``gpu:TYPE:N``), or one MIG slice (``gpu:MIG_TYPE:1``, the type as Slurm's
gres.conf names MIG profiles, e.g. with ``AutoDetect=nvml``). Slurm then sets the job's
``CUDA_VISIBLE_DEVICES``; it never shares a GPU, so ``round_robin`` asks for what ``blocks``
does and a student waits in the queue when none is free. Instructors' servers ask for no GPU
(they grade with ``course grade --slurm``). The server's environment is the single-node hub's
(the course's Python, Jupyter configuration and nbgrader exchange), passed to the job by
``sbatch --export``; the exchange must be on the shared filesystem every node mounts.
"""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

from grading.hub.gpus import POLICIES

#: course_hub.toml's ``spawner`` values: the single-node hub (default) or a Slurm job per server.
SPAWNERS = ("local", "slurm")
#: Seconds a server's job may wait in the queue and start before the hub gives up on it.
DEFAULT_START_TIMEOUT_S = 300


def spawner_kind(settings: dict) -> str:
    """"local" or "slurm" from course_hub.toml's settings; ValueError for anything else."""
    kind = settings.get("spawner", "local")
    if kind not in SPAWNERS:
        raise ValueError(f"course_hub.toml: spawner must be one of {', '.join(SPAWNERS)}, got {kind!r}")
    return kind


def gres_request(policy: dict, slurm: dict) -> str:
    """Slurm's ``--gres`` value for one student's server under the GPU ``policy`` ([gpus]);
    ValueError for an unknown policy, a count below 1 or "mig" without ``mig_type``."""
    name = policy.get("policy", "round_robin")
    if name not in POLICIES:
        raise ValueError(f"unknown GPU policy {name!r}: choose one of {', '.join(POLICIES)}")
    if name == "mig":
        if not slurm.get("mig_type"):
            raise ValueError("course_hub.toml: policy \"mig\" on Slurm needs [slurm] mig_type, the GRES type of "
                             "a MIG slice in the cluster's gres.conf (e.g. \"1g.10gb\")")
        return f"gpu:{slurm['mig_type']}:1"
    count = int(policy.get("per_student", 1))
    if count < 1:
        raise ValueError(f"course_hub.toml: per_student must be at least 1, got {count}")
    return f"gpu:{slurm['gpu_type']}:{count}" if slurm.get("gpu_type") else f"gpu:{count}"


def configure(c, settings: dict, python: str) -> None:
    """Make ``c`` (JupyterHub's config) spawn every server as a Slurm job of ``[slurm]``'s partition,
    running ``python``'s ``batchspawner-singleuser``; the hub's API listens where the nodes reach it."""
    slurm = settings.get("slurm", {})
    if not slurm.get("partition"):
        raise ValueError("course_hub.toml: spawner = \"slurm\" needs [slurm] partition")
    c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
    c.JupyterHub.hub_ip = slurm.get("hub_ip", "0.0.0.0")
    c.JupyterHub.hub_connect_ip = slurm.get("hub_connect_ip", socket.gethostname())
    c.SlurmSpawner.ip = "0.0.0.0"  # the proxy reaches the server on its node
    if os.environ.get("SLURM_CONF"):  # a cluster whose slurm.conf is elsewhere: sbatch, squeue, scancel find it
        c.Spawner.environment = {**c.Spawner.environment, "SLURM_CONF": os.environ["SLURM_CONF"]}
    c.SlurmSpawner.req_partition = slurm["partition"]
    c.SlurmSpawner.req_runtime = str(slurm.get("time", "04:00:00"))
    c.SlurmSpawner.req_memory = str(slurm.get("memory", ""))
    c.SlurmSpawner.req_nprocs = str(slurm.get("cpus", ""))
    c.SlurmSpawner.req_options = str(slurm.get("options", ""))
    c.SlurmSpawner.req_gres = gres_request(settings.get("gpus", {}), slurm)
    # the hub runs as root (course hub): it submits each job as the student with runuser, no sudoers entry
    runuser = shutil.which("runuser", path="/usr/sbin:/sbin:/usr/bin:/bin") or "runuser"  # the servers' PATH has no sbin
    c.SlurmSpawner.exec_prefix = slurm.get("exec_prefix", f"{runuser} -u {{username}} --")
    # batchspawner-singleuser reports the server's port to the hub, then runs the script named next
    c.SlurmSpawner.batchspawner_singleuser_cmd = str(Path(python).parent / "batchspawner-singleuser")
    c.SlurmSpawner.cmd = [str(Path(python).parent / "jupyterhub-singleuser")]
    c.SlurmSpawner.start_timeout = int(slurm.get("start_timeout", DEFAULT_START_TIMEOUT_S))
    c.SlurmSpawner.http_timeout = int(slurm.get("start_timeout", DEFAULT_START_TIMEOUT_S))


def prepare_server(spawner, role: str, environment: dict, policy: dict) -> None:
    """The pre-spawn step on Slurm: the server's environment (Slurm, not the hub, sets
    CUDA_VISIBLE_DEVICES from the GRES request); instructors' jobs ask for no GPU."""
    student = {"COURSE_GPU_POLICY": policy.get("policy", "round_robin")} if role == "student" else {}
    spawner.environment = {**environment, **student}
    if role != "student":
        spawner.req_gres = ""
    spawner.log.info("course: %s's server is a Slurm job with --gres=%r", spawner.user.name, spawner.req_gres)
