"""One warm judge process (``python -E -s -m grading.judge.server --service``, in the course root) driven by a grading worker.
Its ranks run in a bubblewrap sandbox (``--sandbox-dir``, a private folder: ``autograder.sandbox``),
in the worker's memory cgroup where there is one (``--cgroup-procs``: ``autograder.memory_cgroup``).

    service = JudgeService(log_path, rank_timeout_s=60, backend="gloo", memory_limit_gib=4, visible_devices="0,1",
                           lab="lab02_collectives")   # its hidden tests' references run once, now
    socket_path, variables = service.begin("alice")  # kernels of alice's autograde connect here
    ...                                       # run nbgrader autograde with LAB_JUDGE_SOCKET=socket_path
                                              # and ``variables`` in its kernels' environment
    verdicts = service.end()                 # what the judge decided, whatever the notebook shows
    service.close()
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

from grading.judge.protocol import read_message, write_message
from grading.paths import COURSE_ROOT, isolated_module


#: labutils' choice of how ranks start: only its rank template runs behind the sandbox's wrapper, so the
#: judge's ranks always start from it (``spawn`` would start them unsandboxed).
START_METHOD_ENV = "LABUTILS_START_METHOD"


def judge_environment(env: dict, visible_devices: str | None = None) -> dict:
    """The judge's environment: ``env`` without ``START_METHOD_ENV``, NCCL's as its sandboxed ranks need
    it (``sandbox.nccl_environment``: each rank takes the judge's environment again as it starts), and
    ``CUDA_VISIBLE_DEVICES`` = ``visible_devices`` (its worker's GPUs, ``worker_gpus``) unless None."""
    from grading.autograder.sandbox import nccl_environment

    stripped = {name: value for name, value in env.items() if name != START_METHOD_ENV}
    return with_visible_devices(nccl_environment(stripped), visible_devices)


CUDA_VISIBLE_ENV = "CUDA_VISIBLE_DEVICES"


def with_visible_devices(env: dict, visible_devices: str | None) -> dict:
    """``env`` with ``CUDA_VISIBLE_DEVICES`` = ``visible_devices`` (unchanged where that is None)."""
    return env if visible_devices is None else dict(env, **{CUDA_VISIBLE_ENV: visible_devices})


def worker_gpus(workers: int, devices: list | None = None) -> list:
    """Per grading worker, the ``CUDA_VISIBLE_DEVICES`` of its judge and kernel: the GPUs this process
    sees (``devices``: ``labutils.devices.backend.visible_cuda_devices()``, read without initialising CUDA),
    cut into ``workers`` disjoint blocks of equal size in order (8 GPUs, 4 workers: "0,1", "2,3",
    "4,5", "6,7"; the remainder idle), each GPU named by its physical index (a MIG device by its
    UUID). None per worker where there is no GPU (the variable is left as it is)."""
    if devices is None:
        from labutils.devices.backend import visible_cuda_devices

        devices = visible_cuda_devices()
    if not devices:
        return [None] * workers
    size = len(devices) // workers
    names = [device.mig_uuid or str(device.gpu_index) for device in devices]
    return [",".join(names[index * size:(index + 1) * size]) for index in range(workers)]


class JudgeServiceFailed(RuntimeError):
    """The judge process stopped or answered nonsense."""


#: The prefix of every variable the judge may ask a submission's kernel to set (labutils' own).
KERNEL_VARIABLE_PREFIX = "LABUTILS_"


def _kernel_variables(variables) -> dict:
    """``variables`` from the judge's "begin" reply, checked: a dict of str to str, every name labutils'
    own. JudgeServiceFailed otherwise."""
    if not isinstance(variables, dict) or not all(
            isinstance(name, str) and isinstance(value, str) and name.startswith(KERNEL_VARIABLE_PREFIX)
            for name, value in variables.items()):
        raise JudgeServiceFailed(f"the judge asked for kernel variables other than {KERNEL_VARIABLE_PREFIX}*: "
                                 f"{variables!r:.200}")
    return dict(variables)


class JudgeService:
    """A judge process kept warm across submissions; one submission at a time."""

    def __init__(self, log_path: str, rank_timeout_s: float, backend: str = "gloo", memory_limit_gib: float = 0.0,
                 course_root: str = COURSE_ROOT, cgroup_procs: str = "", visible_devices: str | None = None,
                 lab: str | None = None):
        self._log_path, self._rank_timeout_s, self._backend = log_path, rank_timeout_s, backend
        self._lab = lab  # the lab of every submission it judges: its references run once (server's --lab)
        self._visible_devices = visible_devices  # this worker's GPUs (``worker_gpus``), None: as inherited
        self._memory_limit_gib, self._course_root, self._cgroup_procs = memory_limit_gib, course_root, cgroup_procs
        self._process = None
        self._socket_dir = None
        self._sandbox_dir = tempfile.mkdtemp(prefix="judge-ranks-")
        self._start()

    def _start(self) -> None:
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                isolated_module("grading.judge.server", "--service", "--rank-timeout", str(self._rank_timeout_s),
                                "--backend", self._backend, "--log", self._log_path,
                                "--memory-limit", str(self._memory_limit_gib), "--sandbox-dir", self._sandbox_dir,
                                "--cgroup-procs", self._cgroup_procs, *(["--lab", self._lab] if self._lab else [])),
                cwd=self._course_root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True, env=judge_environment(os.environ, self._visible_devices))

    def _exchange(self, message: dict) -> dict:
        try:
            write_message(self._process.stdin, message)
            reply, _ = read_message(self._process.stdout)
        except (OSError, EOFError) as exc:
            raise JudgeServiceFailed(f"the judge process stopped (see {self._log_path}): {exc}") from None
        if "error" in reply:
            raise JudgeServiceFailed(reply["error"])
        return reply

    def begin(self, submission: str) -> tuple[str, dict]:
        """Open a fresh socket for ``submission``'s kernels; return its path and the variables the
        judge asks the kernels to add to their environment (``server.kernel_environment``). Restarts a
        dead judge."""
        if self._process.poll() is not None:
            self._start()
        self._socket_dir = tempfile.mkdtemp(prefix="judge-")
        path = os.path.join(self._socket_dir, "judge.sock")
        reply = self._exchange({"cmd": "begin", "submission": submission, "socket": path})
        return path, _kernel_variables(reply.get("kernel_env", {}))

    def end(self) -> list:
        """Close the submission's socket; its verdicts, in the order the judge gave them."""
        try:
            return self._exchange({"cmd": "end"})["verdicts"]
        finally:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
            self._empty_sandbox_folders()

    def _empty_sandbox_folders(self) -> None:
        """Remove what the submission's ranks (ended with ``end``) left in their writable folder, and
        the staged copies of grading/, so that nothing of one submission reaches the next one's ranks."""
        from grading.autograder.sandbox import staging_folder

        shutil.rmtree(staging_folder(self._sandbox_dir), ignore_errors=True)
        for entry in os.scandir(self._sandbox_dir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                os.unlink(entry.path)

    def close(self) -> None:
        """Stop the judge process (and, with it, its ranks)."""
        if self._process is None:
            return
        try:
            write_message(self._process.stdin, {"cmd": "stop"})
            self._process.stdin.close()
            self._process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        self._process = None
        from grading.autograder.sandbox import staging_folder

        shutil.rmtree(self._sandbox_dir, ignore_errors=True)
        shutil.rmtree(staging_folder(self._sandbox_dir), ignore_errors=True)
