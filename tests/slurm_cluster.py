"""A one-node Slurm cluster in a temporary folder, for the tests: Debian's munge, slurmctld and
slurmd, started as this user's child processes with a generated slurm.conf, and stopped by
their process ids.

    with SlurmCluster(tmp_path) as cluster:
        subprocess.run(["sbatch", ...], env=cluster.env)

The node has this machine's CPUs, is named after this host (address 127.0.0.1) and offers
``FAKE_GPUS`` GPUs of type ``fake`` through GRES: character devices like /dev/null in the temporary
folder stand in for /dev/nvidiaN, so Slurm hands jobs their indices in ``CUDA_VISIBLE_DEVICES`` while nothing is a
GPU. ``missing()`` says in one line why no cluster can start here (packages not installed). The
tests take one per module as the ``slurm`` fixture (tests/conftest.py).
"""
from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time

from free_ports import free_port

#: The node is named after this host, so the hub reaches a server at the name Slurm reports.
NODE = socket.gethostname().split(".")[0]
PARTITION = "course"
FAKE_GPUS = 2
DAEMONS = ("munged", "slurmctld", "slurmd")
#: Seconds the daemons may take to answer (generous: the machine may be loaded).
START_TIMEOUT_S = 90.0


def missing() -> str:
    """Why no cluster can start here, in one line; "" when it can."""
    absent = [name for name in DAEMONS + ("sbatch", "sinfo", "scontrol")
              if not shutil.which(name) and not os.path.exists(f"/usr/sbin/{name}")]
    if absent:
        return (f"Slurm is not installed ({', '.join(absent)} missing): "
                "as root, make slurm-deps (apt-get install munge slurmctld slurmd slurm-client)")
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (slurmd starts jobs as their user)"
    return ""


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """munged, slurmctld and slurmd under ``folder``; ``env`` points Slurm's commands at them."""

    def __init__(self, folder: str, cpus: int | None = None):
        self.folder = os.path.abspath(str(folder))
        self.cpus = cpus or os.cpu_count() or 2
        self.processes: dict = {}
        self.conf = os.path.join(self.folder, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)

    def path(self, *names: str) -> str:
        return os.path.join(self.folder, *names)

    def _write_config(self) -> None:
        """slurm.conf and gres.conf: one node with this machine's CPUs and FAKE_GPUS fake GPUs."""
        for sub in ("state", "spool", "log", "munge", "munge-key", "dev"):
            os.makedirs(self.path(sub), exist_ok=True)
        os.chmod(self.folder, 0o755)  # jobs of other users reach munge's socket and the logs
        os.chmod(self.path("munge"), 0o755)
        os.chmod(self.path("munge-key"), 0o700)
        for index in range(FAKE_GPUS):
            # a character device like /dev/null (Slurm wants a device file; it numbers the GPUs by its name)
            os.mknod(self.path("dev", f"nvidia{index}"), stat.S_IFCHR | 0o666, os.makedev(1, 3))
        with open(os.open(self.path("munge-key", "munge.key"), os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(128))  # this cluster's own key
        lines = [
            "ClusterName=course", f"SlurmctldHost={NODE}(127.0.0.1)", "MailProg=/bin/true",
            "SlurmUser=root", "SlurmdUser=root", "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.path('munge', 'socket')}",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"StateSaveLocation={self.path('state')}", f"SlurmdSpoolDir={self.path('spool')}",
            f"SlurmctldPidFile={self.path('slurmctld.pid')}", f"SlurmdPidFile={self.path('slurmd.pid')}",
            f"SlurmctldLogFile={self.path('log', 'slurmctld.log')}", f"SlurmdLogFile={self.path('log', 'slurmd.log')}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "MpiDefault=none", "ReturnToService=2", "GresTypes=gpu",
            "SchedulerParameters=sched_interval=1", "MinJobAge=300", "KillWait=5", "InactiveLimit=0",
            f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} Gres=gpu:fake:{FAKE_GPUS} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(self.path("gres.conf"), "w") as f:
            f.write(f"NodeName={NODE} Name=gpu Type=fake File={self.path('dev')}/nvidia[0-{FAKE_GPUS - 1}]\n")

    def _start(self, name: str, argv: list) -> None:
        log = open(self.path("log", f"{name}.out"), "w")
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                start_new_session=True)
        log.close()

    def _wait_for(self, what: str, ready, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``ready()`` until it is true; RuntimeError with the daemons' logs if a daemon died or time ran out."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while not ready():
            dead = [n for n, p in self.processes.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"the test Slurm cluster did not get {what} "
                                   f"({'exited: ' + ', '.join(dead) if dead else 'timed out'}):\n{self.logs()}")
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _answers(self, *argv: str) -> str:
        result = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=60)
        return result.stdout.strip() if result.returncode == 0 else ""

    def start(self) -> "SlurmCluster":
        self._write_config()
        munge = self.path("munge")
        self._start("munged", [_daemon("munged"), "--foreground", "--force", f"--socket={munge}/socket",
                               f"--key-file={self.path('munge-key', 'munge.key')}", f"--pid-file={munge}/munged.pid",
                               f"--seed-file={self.path('munge-key', 'seed')}", f"--log-file={self.path('log', 'munged.log')}"])
        self._wait_for("munge's socket", lambda: os.path.exists(f"{munge}/socket"))
        self._start("slurmctld", [_daemon("slurmctld"), "-D", "-i", "-f", self.conf])
        self._wait_for("slurmctld answering", lambda: "UP" in self._answers("scontrol", "ping"))
        self._start("slurmd", [_daemon("slurmd"), "-D", "-N", NODE, "-f", self.conf])
        self._wait_for(f"node {NODE} idle",
                       lambda: self._answers("sinfo", "-h", "-n", NODE, "-o", "%T").rstrip("*") == "idle")
        return self

    def logs(self) -> str:
        out = []
        for name in sorted(os.listdir(self.path("log"))):
            with open(self.path("log", name), errors="replace") as f:
                out.append(f"--- {name}\n" + f.read()[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        """Stop slurmd, slurmctld, then munged, by their process ids; kill what does not stop."""
        for name in ("slurmd", "slurmctld", "munged"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def __enter__(self) -> "SlurmCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()


def run(cluster: SlurmCluster, argv: list, timeout_s: float = 300.0, **kwargs) -> subprocess.CompletedProcess:
    """Run a Slurm command against ``cluster``; its output as text."""
    return subprocess.run(argv, env=kwargs.pop("env", cluster.env), capture_output=True, text=True,
                          timeout=timeout_s, **kwargs)
