"""A bubblewrap (``bwrap``) sandbox around every process a submission runs.

``course grade`` starts each submission's kernel with ``SandboxedKernelManager`` (nbgrader's
``Execute.kernel_manager_class``): the kernel, and every rank it launches, run in

- a new mount namespace whose root holds only, read-only: the system (``/usr``, ``/etc``, ...),
  the Python installation and its environment, ``labutils``, and the few ``grading`` modules a
  hidden-test cell's client needs (``grading.judge.client``: ``CLIENT_MODULES``); never the rest
  of ``grading/``, ``solutions/``, the gradebook, the feedback or another submission;
- one writable folder, the submission's scratch copy of its notebook folder, mounted where the
  notebook runs (so what the code writes never reaches the course folder), a private ``/tmp``
  and ``HOME``;
- its own network namespace (``--unshare-net``: loopback only, enough for the ranks' gloo), so
  the kernel talks to nbgrader over jupyter's IPC transport (Unix sockets in a runtime folder
  bound in) and to the judge through its Unix socket, bound in read-only (it cannot be replaced);
- its own PID namespace and session (``--unshare-pid --die-with-parent --new-session``): when
  the kernel ends, every process it started (forks, ``setsid`` daemons) ends with it;
- a memory cap that counts shared and anonymous mappings (``mmap``) as well as the heap: an
  address-space cap (RLIMIT_AS, ``prlimit``) of every process, or, on a GPU node, where CUDA
  reserves far more address space than it uses, the memory limit of the worker's cgroup
  (``memory_cgroup``), which every process joins before ``bwrap`` starts; ``/dev/nvidia*`` are
  passed in there.

    bwrap = find_bwrap()                  # SandboxUnavailable says how to install it
    argv = sandbox_command(bwrap, SandboxSpec(...), ["python", "-m", "ipykernel_launcher", ...])
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import asdict, dataclass

from jupyter_client.manager import AsyncKernelManager

from grading.autograder.memory_cgroup import join_command
from grading.autograder.package_copies import other_copies

#: Environment variable holding the per-submission sandbox settings (JSON of ``SandboxSpec``).
SANDBOX_ENV = "LAB_SANDBOX"
#: The grading modules a hidden-test cell imports (``from grading.judge import judge``).
CLIENT_MODULES = ("__init__.py", "paths.py", "judge/__init__.py", "judge/client.py", "judge/protocol.py")
#: System folders bound read-only when they exist.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
#: Seconds ``probe`` waits for a trivial sandbox to run.
PROBE_TIMEOUT_S = 30.0
#: Address space a sandboxed process may map at least, in bytes: torch on CPU with gloo and the
#: labs' tensors runs in under 2 GiB (its libraries alone map about 1 GiB).
MIN_ADDRESS_SPACE_BYTES = 3 * 2**30
INSTALL_HINT = ("course grade runs every submission in a bubblewrap sandbox; install it "
                "(Debian/Ubuntu: sudo apt-get install bubblewrap)")


#: What lets an ordinary user's bwrap create its namespaces (Debian, Ubuntu, most distributions).
USER_NAMESPACES_HINT = ("as an ordinary user bwrap needs unprivileged user namespaces: sysctl "
                        "kernel.unprivileged_userns_clone=1 (Debian), user.max_user_namespaces above 0, and on "
                        "Ubuntu 23.10 or later kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor "
                        "profile for bwrap; or run course grade as root")


class SandboxUnavailable(RuntimeError):
    """bwrap is missing or cannot create namespaces here; the message says what to do."""


def find_bwrap() -> str:
    """The path of ``bwrap``; SandboxUnavailable (with the install command) when it is missing."""
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(f"bwrap not found on PATH: {INSTALL_HINT}")
    return path


def probe(bwrap: str) -> None:
    """Run ``true`` in a sandbox like the kernels'; SandboxUnavailable with bwrap's words if it fails.
    An ordinary user's bwrap (not setuid) needs unprivileged user namespaces: the message names the
    settings that allow them."""
    argv = [bwrap, "--cap-drop", "ALL", *_system_binds(), "--proc", "/proc", "--dev", "/dev", "--unshare-net",
            "--unshare-pid", "--die-with-parent", "--new-session", "true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode:
        raise SandboxUnavailable(f"bwrap cannot create a sandbox here: {done.stderr.strip()[-300:]}" +
                                 ("" if os.geteuid() == 0 else f" ({USER_NAMESPACES_HINT})"))


@dataclass(frozen=True)
class SandboxSpec:
    """What one submission's sandbox shows. Paths are absolute and appear at the same place inside.

    ``readonly``: extra folders or files bound read-only; ``hidden``: folders covered by an empty
    tmpfs where a system or Python bind would show them (the course, its grading folder); ``runtime_dir``: jupyter's connection
    file and IPC sockets (read-write); ``scratch_dir``: bound read-write at ``workdir``, where the
    notebook runs; ``judge_socket``: bound read-only; ``memory_limit_bytes``: RLIMIT_AS of every
    process (0: none); ``cgroup_procs``: the ``cgroup.procs`` file of the memory cgroup the sandbox
    joins ("": none); ``gpu``: pass in the NVIDIA device files (``/dev/nvidia*``,
    ``/dev/nvidia-caps``, found again at each start: ``nvidia-uvm`` or MIG's may appear later); ``output_log``: the file that gets the first ``MAX_OUTPUT_LOG_BYTES``
    of what the kernel and its ranks write to their stdout and stderr ("": discarded). The sandbox holds
    no file descriptor of the grader's own logs."""

    workdir: str
    scratch_dir: str
    runtime_dir: str
    readonly: tuple = ()
    hidden: tuple = ()
    judge_socket: str = ""
    memory_limit_bytes: int = 0
    cgroup_procs: str = ""
    gpu: bool = False
    output_log: str = ""

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, text: str) -> "SandboxSpec":
        values = json.loads(text)
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _system_binds() -> list:
    args = []
    for folder in SYSTEM_DIRS:
        if os.path.exists(folder):
            args += ["--ro-bind", folder, folder]
    return args


def python_paths() -> list:
    """Folders the kernel's Python needs: the installation, the environment, every import path
    outside the course root except the course's own packages (bound one by one)."""
    paths = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(p for p in paths if os.path.isdir(p))


def course_readonly(course_root: str) -> list:
    """What a student's copy of the course holds, to bind read-only: ``labutils`` and the client
    modules of ``grading`` (nothing else of ``grading/``)."""
    grading_dir = os.path.join(course_root, "grading")
    found = [os.path.join(course_root, "labutils")]
    found += [os.path.join(grading_dir, name) for name in CLIENT_MODULES]
    return [p for p in found if os.path.exists(p)]


def submission_spec(sandbox_root: str, student: str, course_root: str, judge_socket: str,
                    memory_limit_gib: float, on_gpu: bool, hidden: tuple = (), cgroup_procs: str = "",
                    output_log: str = "") -> SandboxSpec:
    """The sandbox of ``student``'s kernel: scratch and runtime folders under ``sandbox_root`` (the
    notebook's folder, ``workdir``, is filled in when the kernel starts), the course's student view,
    the judge's socket; ``course_root``, every other copy of ``grading`` the interpreter could import
    (``package_copies``) and ``hidden`` (the course folder, the submissions) covered where a system
    bind would show them; the memory cgroup of ``cgroup_procs`` when given, else
    RLIMIT_AS of ``memory_limit_gib`` GiB (``address_space_cap``); ``/dev/nvidia*`` passed in on a GPU node."""
    folder = os.path.join(sandbox_root, student)
    cap = 0 if cgroup_procs else address_space_cap(memory_limit_gib, on_gpu)
    return SandboxSpec(workdir="", scratch_dir=os.path.join(folder, "scratch"),
                       runtime_dir=os.path.join(folder, "runtime"), readonly=tuple(course_readonly(course_root)),
                       hidden=(course_root, sandbox_root, *other_copies("grading", course_root), *hidden),
                       judge_socket=judge_socket, memory_limit_bytes=cap, cgroup_procs=cgroup_procs,
                       gpu=on_gpu, output_log=output_log)


def address_space_cap(memory_limit_gib: float, on_gpu: bool) -> int:
    """RLIMIT_AS of each sandboxed process, in bytes: ``memory_limit_gib`` GiB and at least
    ``MIN_ADDRESS_SPACE_BYTES``; 0 (none) for no limit or on a GPU node (a cgroup caps memory there)."""
    return 0 if on_gpu or memory_limit_gib <= 0 else max(int(memory_limit_gib * 2**30), MIN_ADDRESS_SPACE_BYTES)


def gpu_devices() -> list:
    """The NVIDIA device files of this node now (none on a CPU machine): ``/dev/nvidia*``, with
    ``/dev/nvidia-caps`` (MIG's capability files) as one folder."""
    return sorted(glob.glob("/dev/nvidia*"))


def device_binds(devices: list) -> list:
    """bwrap's words that pass ``devices`` in (``--dev-bind`` each, at the same path)."""
    return [word for device in devices for word in ("--dev-bind", device, device)]


#: NCCL's variables a sandbox keeps from the site's (what it prints, nothing of how it connects).
NCCL_KEPT = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")
#: NCCL's settings in a sandbox, whose network namespace has loopback only: sockets over ``lo``, no
#: InfiniBand, no site network plugin (a site's ``NCCL_SOCKET_IFNAME=ib0``, ``NCCL_NET=IB`` or
#: ``NCCL_TOPO_FILE`` under /home would make every NCCL launch fail there).
NCCL_SANDBOX = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1", "NCCL_NET_PLUGIN": "none"}
#: NCCL's site configuration file, read by every NCCL process whatever its environment (masked inside).
NCCL_CONF = "/etc/nccl.conf"


def nccl_environment(env: dict) -> dict:
    """``env`` with every ``NCCL_*`` variable but ``NCCL_KEPT`` dropped and ``NCCL_SANDBOX`` set."""
    kept = {k: v for k, v in env.items() if not k.startswith("NCCL_") or k in NCCL_KEPT}
    return {**kept, **NCCL_SANDBOX}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _namespace_args(readonly: list, hidden: list = ()) -> list:
    """bwrap's options shared by every sandbox: no capabilities (root keeps none inside), namespaces,
    the system, Python and ``readonly``; each folder of ``hidden`` that one of those binds would
    show (a course under ``/opt``, say) is covered by an empty tmpfs first."""
    shown = [*SYSTEM_DIRS, *python_paths()]
    args = ["--cap-drop", "ALL", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", *_system_binds(), "--proc", "/proc", "--dev", "/dev",
            "--tmpfs", "/tmp", "--tmpfs", "/home", "--dir", HOME]
    if os.path.isdir("/sys"):  # read-only: NCCL and CUDA read the PCI and NUMA topology there
        args += ["--ro-bind", "/sys", "/sys"]
    for path in python_paths():  # after the tmpfs: a course or venv under /home stays visible
        args += ["--ro-bind", path, path]
    covered = [h for h in hidden if any(_inside(h, folder) for folder in shown)]
    for folder in covered:
        args += ["--tmpfs", folder]
    for path in [*(p for p in python_paths() if any(_inside(p, h) for h in covered)), *readonly]:
        args += ["--ro-bind", path, path]
    if os.path.exists(NCCL_CONF):  # after every bind that could show it
        args += ["--dev-bind", os.devnull, NCCL_CONF]  # reads empty
    return args


def _address_space_cap(memory_limit_bytes: int) -> list:
    return ["prlimit", f"--as={memory_limit_bytes}", "--"] if memory_limit_bytes else []


def sandbox_command(bwrap: str, spec: SandboxSpec, argv: list, env: dict) -> list:
    """The command line that runs ``argv`` in ``spec``'s sandbox with exactly ``env`` as environment."""
    args = [bwrap, "--clearenv", *_namespace_args(list(spec.readonly), list(spec.hidden)),
            "--bind", spec.runtime_dir, spec.runtime_dir, "--bind", spec.scratch_dir, spec.workdir]
    args += device_binds(gpu_devices() if spec.gpu else [])
    if spec.judge_socket:
        args += ["--ro-bind", spec.judge_socket, spec.judge_socket]
    for name, value in nccl_environment(env).items():
        args += ["--setenv", name, value]
    args += ["--remount-ro", "/", "--chdir", spec.workdir, "--"]
    return join_command(spec.cgroup_procs, args + _address_space_cap(spec.memory_limit_bytes) + list(argv))


#: What of ``grading/`` the judge's rank template gets: ``rank_guard`` alone, which deletes it and execs
#: the plain template (the ranks' harness, rank code and isolation arrive by value: ``judge/shipping``).
RANK_GRADING_FILES = ("__init__.py", "autograder/__init__.py", "autograder/rank_guard.py")
#: Stands for the staged copy's folder in the wrapper's words until ``STAGE_CODE`` makes it.
STAGED_PLACEHOLDER = "{staged grading}"
#: Stands for the NVIDIA device files' binds in the wrapper's words until ``STAGE_CODE`` finds them.
DEVICES_PLACEHOLDER = "{gpu devices}"
#: Run outside the sandbox before every template start: join the memory cgroup whose cgroup.procs is
#: argv[5] (if any), copy ``RANK_GRADING_FILES`` of argv[1] into a fresh folder under argv[2], put its
#: path for argv[3] in the rest of argv and the binds of the NVIDIA device files there now for
#: ``DEVICES_PLACEHOLDER``, point stdout and stderr at /dev/null (the judge's log stays outside: the
#: ranks' output reaches the judge over their own links), and exec that (bwrap).
STAGE_CODE = """import glob, os, shutil, sys, tempfile
DEVICES = %r
source, parent, placeholder, files, procs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(','), sys.argv[5]
if procs:
    with open(procs, 'w') as f:
        f.write(str(os.getpid()))
os.makedirs(parent, exist_ok=True)
staged = tempfile.mkdtemp(dir=parent)
for name in files:
    target = os.path.join(staged, name)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(os.path.join(source, name)):
        shutil.copytree(os.path.join(source, name), target, ignore=shutil.ignore_patterns('__pycache__'))
    else:
        shutil.copy(os.path.join(source, name), target)
argv = [staged if word == placeholder else word for word in sys.argv[6:]]
if DEVICES in argv:
    at = argv.index(DEVICES)
    argv[at:at + 1] = [w for d in sorted(glob.glob('/dev/nvidia*')) for w in ('--dev-bind', d, d)]
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
os.execv(argv[0], argv)
""" % DEVICES_PLACEHOLDER


def staging_folder(work_dir: str) -> str:
    """Where the copies of ``grading/`` for the judge's rank templates are staged: beside ``work_dir``,
    outside every sandbox (``JudgeService`` removes both)."""
    return work_dir.rstrip("/") + "-staged"


def judge_rank_wrapper(bwrap: str, course_root: str, work_dir: str, memory_limit_gib: float, on_gpu: bool,
                       cgroup_procs: str = "") -> list:
    """The words before the judge's rank template (``labutils``' ``LABUTILS_RANK_WRAPPER``): its ranks
    run the submission's functions in a sandbox that shows the course's ``labutils`` read-only,
    ``work_dir`` read-write (the judge's TMPDIR: the ranks' sockets), nothing else of the course (no
    gradebook, no submissions), loopback only, its own PID namespace (restarted for every
    submission), in the memory cgroup of ``cgroup_procs`` or with RLIMIT_AS as for kernels. In place
    of ``grading/`` the template gets a copy of the files the ranks import, staged for it alone,
    which it imports and deletes before any rank starts
    (``rank_guard``): a submission's code on a rank finds no grader file to read or reload. Every
    other copy of ``grading`` the interpreter could import (the course installed into its
    environment, an editable install's checkout) shows that same staged folder, emptied with it. The
    template does not import from ``work_dir`` (``python -P``), and ``JudgeService`` empties it after
    every submission: nothing a submission leaves there reaches the next one's ranks."""
    grading_dir = os.path.join(course_root, "grading")
    stage = [sys.executable, "-I", "-c", STAGE_CODE, grading_dir, staging_folder(work_dir), STAGED_PLACEHOLDER,
             ",".join(RANK_GRADING_FILES), cgroup_procs]
    args = [bwrap, *_namespace_args([os.path.join(course_root, "labutils")], [course_root]),
            "--bind", STAGED_PLACEHOLDER, grading_dir, "--bind", work_dir, work_dir]
    for installed in other_copies("grading", course_root):  # the course installed as a package too
        args += ["--bind", STAGED_PLACEHOLDER, installed]
    args += [DEVICES_PLACEHOLDER] if on_gpu else []
    args += [word for name in os.environ if name.startswith("NCCL_") for word in ("--unsetenv", name)]
    args += [word for name, value in nccl_environment({}).items() for word in ("--setenv", name, value)]
    cap = 0 if cgroup_procs else address_space_cap(memory_limit_gib, on_gpu)
    guard = [sys.executable, "-P", "-m", "grading.autograder.rank_guard", grading_dir]  # -P: not ``work_dir`` first
    return stage + args + ["--remount-ro", "/", "--chdir", work_dir, "--"] + _address_space_cap(cap) + guard


#: Variables a sandboxed kernel keeps from the worker's environment (nothing else: no LD_PRELOAD).
KEEP_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "LAB_JUDGE_SOCKET", "LAB_JUDGE_RANK_TIMEOUT",
            "OMP_NUM_THREADS", "PYTHONPATH")
KEEP_ENV_PREFIXES = ("NCCL_", "LABUTILS_")  # NCCL's as ``nccl_environment`` leaves them
#: The sandboxed processes' home folder (on a private tmpfs).
HOME = "/home/student"


def kernel_environment(env: dict) -> dict:
    """The sandboxed kernel's environment: ``KEEP_ENV`` and ``KEEP_ENV_PREFIXES`` from ``env``, a private
    HOME and TMPDIR."""
    kept = {k: v for k, v in env.items() if k in KEEP_ENV or k.startswith(KEEP_ENV_PREFIXES)}
    return dict(kept, HOME=HOME, TMPDIR="/tmp", MPLCONFIGDIR="/tmp/matplotlib")


def prepare_scratch(workdir: str, scratch_dir: str) -> None:
    """``scratch_dir`` = a fresh copy of ``workdir`` (the notebook's folder), without symbolic links."""
    shutil.rmtree(scratch_dir, ignore_errors=True)
    shutil.copytree(workdir, scratch_dir, symlinks=False, ignore_dangling_symlinks=True)


#: Bytes of a kernel's own stdout and stderr (and its ranks') kept in its submission's output log.
MAX_OUTPUT_LOG_BYTES = 2**20


def bounded_sink(path: str, limit: int = MAX_OUTPUT_LOG_BYTES) -> int:
    """The write end of a pipe whose first ``limit`` bytes a thread of this process copies to ``path``
    ("": nowhere) and whose rest it reads and drops, so a process writing without end neither blocks
    nor fills the disk; the thread ends when every writer has closed the pipe."""
    read_fd, write_fd = os.pipe()

    def drain():
        kept = 0
        with os.fdopen(read_fd, "rb", buffering=0) as source, open(path or os.devnull, "wb") as target:
            while chunk := source.read(1 << 16):
                if kept < limit:
                    target.write(chunk[:limit - kept])
                    kept += len(chunk)

    threading.Thread(target=drain, name="kernel-output", daemon=True).start()
    return write_fd


class SandboxedKernelManager(AsyncKernelManager):
    """jupyter's KernelManager over IPC, starting the kernel inside the submission's sandbox
    (``SandboxSpec`` from ``$LAB_SANDBOX``, set by ``course grade`` for each submission; without
    it the kernel does not start)."""

    def __init__(self, **kwargs):
        text = os.environ.get(SANDBOX_ENV)
        if not text:
            raise SandboxUnavailable(f"${SANDBOX_ENV} is not set: course grade starts sandboxed kernels only")
        self.sandbox = SandboxSpec.from_env(text)
        os.makedirs(self.sandbox.runtime_dir, exist_ok=True)
        kwargs.setdefault("transport", "ipc")
        kwargs.setdefault("connection_file", os.path.join(self.sandbox.runtime_dir, "kernel.json"))
        super().__init__(**kwargs)

    async def _async_pre_start_kernel(self, **kw):
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        workdir = os.path.abspath(kw.get("cwd") or os.getcwd())
        spec = SandboxSpec(**{**asdict(self.sandbox), "workdir": workdir})
        prepare_scratch(workdir, spec.scratch_dir)
        env = kernel_environment(kw.get("env") or os.environ)
        kw["env"] = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        kw["cwd"] = spec.runtime_dir
        self._output_fd = bounded_sink(spec.output_log)
        kw["stdout"] = kw["stderr"] = self._output_fd
        kw["stdin"] = subprocess.DEVNULL
        return sandbox_command(find_bwrap(), spec, cmd, env), kw

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        """Launch the kernel, then close this process's end of its output pipe (the kernel holds its own)."""
        try:
            await super()._async_launch_kernel(kernel_cmd, **kw)
        finally:
            os.close(self._output_fd)

    def _kernel_pid(self) -> int | None:
        """The kernel's pid as this process sees it: bwrap, its child (the namespace's init), then the
        kernel (``prlimit`` execs it)."""
        pid = self.provisioner.process.pid if self.provisioner and self.provisioner.process else None
        for _ in range(2):
            try:
                with open(f"/proc/{pid}/task/{pid}/children") as f:
                    children = f.read().split()
            except (OSError, TypeError):
                return None
            if not children:
                return None
            pid = int(children[0])
        return pid

    async def _async_interrupt_kernel(self) -> None:
        """SIGINT to the kernel itself (``--new-session`` puts it out of bwrap's process group)."""
        pid = self._kernel_pid()
        if pid is not None:
            os.kill(pid, signal.SIGINT)

    interrupt_kernel = _async_interrupt_kernel

