"""The judge process: a fresh, isolated interpreter that runs hidden tests and keeps verdicts.

    cd COURSE_ROOT && python -E -s -m grading.judge.server --stdio   # started by a kernel (judge.client)
    cd COURSE_ROOT && python -E -s -m grading.judge.server --service --log FILE  # by `course grade`

``-E`` ignores PYTHON* variables and ``-s`` the user site; ``-m`` puts the course root (the
current folder) first on the module path, so the judge imports that course's ``grading``
(``grading.paths``). The engine, the lab specs and the reference kernels (with --lab, that lab's;
lab 7's import DTensor, 0.4 s of CPU) are imported before the first request; at exit they are not
freed one by one (``labutils.command.kernel_exit``). Output of the ranks goes to the log (or
nowhere), never to the reply channel, which is a private copy of the original stdout.

--stdio: requests on stdin, one reply each on stdout; the process ends with stdin.
--service: ``course grade`` drives it on stdin/stdout with JSON control frames:
    {"cmd": "begin", "submission": ID, "socket": PATH}  -> {"ok": true, "kernel_env": {...}}; kernels
        may now connect to PATH (one request per connection), their verdicts are kept for ID; a fresh
        rank template for ID starts importing torch meanwhile; ``kernel_env``: variables for the
        submission's kernel (``kernel_environment``);
    {"cmd": "end"}  -> {"submission": ID, "verdicts": [...]}; PATH is removed.
    With --lab LAB, each hidden test's reference runs once as the service starts, and every submission
    is judged against those runs (``run_class_references``); the first "begin" is answered after them.
The kernels' replies are only what they print; ``course grade`` scores from the kept
verdicts, so a notebook that fakes a pass is caught.
"""
from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import traceback

from grading.judge.bounded_log import BoundedLog
from grading.judge.limits import limit_memory
from labutils.command.kernel_exit import freeze_at_exit

#: Seconds a connected kernel has to send its whole request.
REQUEST_READ_TIMEOUT_S = 60.0
#: What a student sees when the judge itself failed (details go to the instructor only).
JUDGE_ERROR_LINE = "✗ the grader failed on this part (judge error); your instructor will grade it by hand"


def _detach_output(log_path: str | None) -> tuple:
    """Keep the original stdout for replies only; send fd 1 and 2 to the log, and ``sys.stdout`` and
    ``sys.stderr`` (where the ranks' output is relayed) through one ``BoundedLog`` onto it.
    Returns (the reply stream, the bounded log)."""
    reply = os.fdopen(os.dup(1), "wb")
    target = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)
    sys.stdout = sys.stderr = log = BoundedLog(1)
    return reply, log


def judge_request(header: dict, blob: bytes, options, note, references: dict | None = None) -> dict:
    """The verdict (as a dict) for one request, against the kept reference run of its test where
    ``references`` ({(lab, test): engine.ReferenceRun}, :func:`run_class_references`) has one, else
    against a new one; judge faults become a judge_error verdict, told to ``note`` (the log's own
    lines) with their detail."""
    from grading.judge import engine

    lab, test = str(header.get("lab")), str(header.get("test"))
    names, sources = list(header.get("names", [])), dict(header.get("sources", {}))
    kept = (references or {}).get((lab, test))
    try:
        if kept is None:
            verdict = engine.run_test(lab, test, names, blob, sources, rank_timeout_s=options.rank_timeout,
                                      backend=options.backend)
        else:
            verdict = engine.judge_against(kept, lab, test, names, blob, sources,
                                           rank_timeout_s=options.rank_timeout, backend=options.backend)
        result = verdict.as_dict()
    except Exception:
        detail = traceback.format_exc()
        result = {"test": test, "title": test, "passed": False, "lines": [], "judge_error": True,
                  "summary": "", "detail": detail}
    if result["judge_error"]:
        result["detail"] = result.get("detail") or "\n".join(result["lines"])
        result["lines"] = [JUDGE_ERROR_LINE]
        result["summary"] = f"{result['title']}: judge error"
    note(f"[judge] {test}: {'passed' if result['passed'] else 'failed'}"
         + ("" if kept is None else " on the class's cases")
         + (f"\n{result['detail']}" if result["judge_error"] else ""))
    return result


def run_class_references(lab: str, options, note) -> dict:
    """The reference's run of every hidden test of ``lab``, made once, now: before any submission, on
    ranks of the template the judge started with, where no submission's code has run. Every submission
    this service judges is held to these runs, on the same cases (drawn fresh for this grading run),
    which halves its launches. {(lab, test): engine.ReferenceRun}; a test whose reference failed is
    left out (each of its requests runs the reference again, and reports the judge error then)."""
    from grading.judge import engine

    kept = {}
    for test in engine.load_lab(lab).TESTS:
        run = engine.run_reference(lab, test, rank_timeout_s=options.rank_timeout, backend=options.backend)
        if isinstance(run, engine.ReferenceRun):
            kept[(lab, test)] = run
            note(f"[judge] {lab} {test}: the reference ran on {len(run.cases)} cases in {run.seconds:.1f} s, "
                 "once for every submission")
        else:
            note(f"[judge] {lab} {test}: the reference failed; it runs again for each submission:\n"
                 + "\n".join(run.lines))
    return kept


def serve_stdio(reply, options, log) -> None:
    from grading.judge.protocol import read_message, write_message

    stdin = sys.stdin.buffer
    while True:
        try:
            header, blob = read_message(stdin)
        except EOFError:
            return
        write_message(reply, judge_request(header, blob, options, log.note))


class _Service:
    """The state of --service mode: the current submission, its socket and its verdicts."""

    def __init__(self, reply, options, log, references: dict):
        self.reply, self.options, self.log, self.references = reply, options, log, references
        self.selector = selectors.DefaultSelector()
        self.submission = None
        self.listener = None
        self.socket_path = None
        self.verdicts: list = []

    def control(self, message: dict) -> bool:
        """Handle one control frame; False when the service should stop."""
        from grading.judge.protocol import write_message

        command = message.get("cmd")
        if command == "begin":
            self._close_listener()
            self.submission, self.verdicts = str(message["submission"]), []
            self.log.start(f"submission {self.submission}")
            self.socket_path = str(message["socket"])
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(self.socket_path)
            self.listener.listen(8)
            self.selector.register(self.listener, selectors.EVENT_READ, "listener")
            _start_fresh_template()
            write_message(self.reply, {"ok": True, "kernel_env": kernel_environment()})
        elif command == "end":
            self._close_listener()
            if self.options.sandbox_dir:  # whatever the submission's ranks started ends with their sandbox
                import labutils

                labutils.shutdown()
            self.log.finish()
            write_message(self.reply, {"submission": self.submission, "verdicts": self.verdicts})
            self.submission, self.verdicts = None, []
        elif command == "stop":
            return False
        else:
            write_message(self.reply, {"error": f"unknown command {command!r}"})
        return True

    def _close_listener(self) -> None:
        if self.listener is not None:
            self.selector.unregister(self.listener)
            self.listener.close()
            self.listener = None
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass

    def serve_connection(self, conn: socket.socket) -> None:
        """One kernel request: read it, judge it, keep the verdict, answer (if still connected)."""
        from grading.judge.protocol import ProtocolError, read_message, write_message

        conn.settimeout(REQUEST_READ_TIMEOUT_S)
        stream = conn.makefile("rwb")
        try:
            header, blob = read_message(stream)
        except (EOFError, ProtocolError, OSError):
            return
        verdict = judge_request(header, blob, self.options, self.log.note, self.references)
        self.verdicts.append(verdict)
        try:
            write_message(stream, verdict)
        except OSError:
            pass  # the kernel went away (interrupted or killed): the verdict is kept anyway


def serve_service(reply, options, log, references: dict) -> None:
    from grading.judge.protocol import read_message

    service = _Service(reply, options, log, references)
    stdin = os.fdopen(0, "rb", buffering=0, closefd=False)  # unbuffered: select() sees every frame
    service.selector.register(stdin, selectors.EVENT_READ, "control")
    while True:
        for key, _ in service.selector.select():
            if key.data == "control":
                try:
                    message, _ = read_message(stdin)
                except EOFError:
                    return
                if not service.control(message):
                    return
            else:
                conn, _ = service.listener.accept()
                with conn:
                    service.serve_connection(conn)


def _start_fresh_template() -> None:
    """Start the rank template and return at once: it imports torch while this process loads the labs
    (at the judge's start) or while ``course grade`` starts the kernel of the submission that begins
    now (``begin``), so the first hidden test does not wait for that import. Fresh for every
    submission: ``end`` stopped the last one's template, and its folders were emptied before this
    ``begin`` (``JudgeService.end``). Nothing when one is running."""
    from labutils.ranks import _starters

    _starters.prestart()


def _later_templates_import_for(lab: str) -> None:
    """The rank templates started from now on (under a sandbox, one for each submission) import what
    ranks that build an optimizer need before their hello where ``lab``'s hidden tests build one
    (``RANKS_BUILD_OPTIMIZERS`` of its spec module), and never where they do not: about 1 s of CPU
    saved for each submission of such a lab. The template already running keeps what it had."""
    from grading.judge import engine
    from labutils.ranks._template import EAGER_IMPORTS_ENV

    os.environ[EAGER_IMPORTS_ENV] = "1" if engine.load_lab(lab).RANKS_BUILD_OPTIMIZERS else "0"


def kernel_environment() -> dict:
    """What the kernels of this service's submissions add to their environment: the import plan of
    its later rank templates (``_later_templates_import_for``), so a kernel's own template, which
    serves the notebook's launches, skips torch's compiler for a lab whose ranks build no optimizer
    (about 1 s of CPU for each submission) and has it imported before any rank of a lab whose ranks
    do. Empty where the variable is unset (no --lab, none inherited): labutils' default plan."""
    from labutils.ranks._template import EAGER_IMPORTS_ENV

    value = os.environ.get(EAGER_IMPORTS_ENV)
    return {} if value is None else {EAGER_IMPORTS_ENV: value}


def _warm_up(options) -> None:
    """Start labutils' rank template now, so the first request pays no torch import."""
    import labutils

    labutils.launch(os.getpid, 1, backend="gloo", timeout=options.rank_timeout)  # any call on one rank


def _scratch_of_its_own() -> None:
    """Outside a sandbox: TMPDIR of the ranks (and of this process) is a folder of this judge's own,
    removed when it ends, so the private folder each rank makes there (``rank_isolation.isolate``)
    goes with it rather than staying in the user's /tmp, one per rank of every check."""
    import atexit
    import shutil
    import tempfile

    scratch = tempfile.mkdtemp(prefix="judge-scratch-")
    atexit.register(shutil.rmtree, scratch, True)
    _ranks_write_in(scratch)


def _ranks_write_in(folder: str) -> None:
    """``folder`` is TMPDIR from now on, here and in every rank this process starts."""
    import tempfile

    os.environ["TMPDIR"] = folder
    tempfile.tempdir = None  # read TMPDIR again


def sandbox_ranks(sandbox_dir: str, backend: str, memory_limit_gib: float, cgroup_procs: str = "") -> None:
    """Every rank this process starts from now on runs in a bubblewrap sandbox (``autograder.sandbox``),
    with ``sandbox_dir`` as TMPDIR, the only folder the ranks may write, in the memory cgroup whose
    ``cgroup.procs`` is ``cgroup_procs`` or else with RLIMIT_AS of ``memory_limit_gib`` GiB (0: none)
    off a GPU node."""
    import json

    from grading.autograder.sandbox import find_bwrap, gpu_devices, judge_rank_wrapper
    from grading.paths import COURSE_ROOT
    from labutils.ranks._starters import RANK_WRAPPER_ENV
    from labutils.ranks._template import EAGER_IMPORTS_ENV

    os.makedirs(sandbox_dir, exist_ok=True)
    os.environ[EAGER_IMPORTS_ENV] = "1"  # no user waits on its first launch, whose ranks would each import them
    _ranks_write_in(sandbox_dir)
    on_gpu = backend != "gloo" and bool(gpu_devices())
    os.environ[RANK_WRAPPER_ENV] = json.dumps(judge_rank_wrapper(find_bwrap(), COURSE_ROOT, sandbox_dir,
                                                                 memory_limit_gib, on_gpu, cgroup_procs))
    if cgroup_procs:  # so that a rank its out-of-memory killer stops is named as such
        from grading.autograder.memory_cgroup import MemoryCgroup
        from grading.judge import perrank

        perrank.memory_cgroup = MemoryCgroup.of_procs(cgroup_procs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="the judge process of the graded labs")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true", help="serve one kernel over stdin/stdout")
    mode.add_argument("--service", action="store_true", help="serve kernels over Unix sockets for course grade")
    parser.add_argument("--rank-timeout", type=float, default=60.0, help="seconds one test's ranks may run")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                        help="the ranks' backend: gloo (default: CPU tensors, the traffic check complete) or nccl "
                             "(one GPU per rank; the loopback byte count is not checked there)")
    parser.add_argument("--log", help="file for the judge's and the ranks' output (default: discarded)")
    parser.add_argument("--sandbox-dir", help="run the ranks in a bubblewrap sandbox with this folder as "
                                              "their only writable place (course grade; default: no sandbox)")
    parser.add_argument("--memory-limit", type=float, default=0.0,
                        help="GiB of data memory per process, the judge's ranks included (default 0: no cap)")
    parser.add_argument("--lab", help="with --service: the lab whose submissions it judges; each hidden test's "
                                      "reference then runs once, before the first submission, and every "
                                      "submission is judged on those cases (default: a new run per request)")
    parser.add_argument("--cgroup-procs", default="",
                        help="the cgroup.procs file of the memory cgroup the sandboxed ranks join (default: none)")
    options = parser.parse_args(argv)
    freeze_at_exit()
    if options.lab and not options.service:
        parser.error("--lab goes with --service (a kernel's judge draws new cases for every request)")
    limit_memory(options.memory_limit)  # before the rank template starts: the ranks inherit it
    if options.sandbox_dir:
        sandbox_ranks(options.sandbox_dir, options.backend, options.memory_limit, options.cgroup_procs)
    else:
        _scratch_of_its_own()
    reply, log = _detach_output(options.log)
    _start_fresh_template()  # after the output is detached: the template must not hold the reply channel
    from grading.judge import engine

    for lab in [options.lab] if options.lab else engine.available_labs():  # before any request (another
        engine.load_lab(lab)                                                # lab's loads when asked)
    if options.lab:
        _later_templates_import_for(options.lab)

    if options.service:
        references = run_class_references(options.lab, options, log.note) if options.lab else {}
        if not references:
            _warm_up(options)
        serve_service(reply, options, log, references)
    else:
        serve_stdio(reply, options, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
