"""The kernel side of the judge: what a hidden-test cell calls.

    from grading.judge import judge
    judge("lab01_tensor_parallel", "test_f", copy_to_tp_region=copy_to_tp_region)

The objects are cloudpickled (classes and functions defined in cells travel by value) and
sent to a judge process, with the cells' sources so that errors can quote the student's
own lines. The verdict's lines are printed (stdout only: nbgrader zeroes a cell that
writes to stderr); a failure raises ``HiddenTestsFailed`` whose traceback, in IPython, is
one line, so no hidden-test source is ever shown.

Where the judge runs: when ``LAB_JUDGE_SOCKET`` is set (by ``course grade``), at that Unix
socket, a warm service that also keeps the verdict for the grader; otherwise in a judge
process this kernel starts once and reuses: ``python -E -s -m grading.judge.server --stdio`` in
the course root this package was imported from (``grading.paths``), so the judge imports that
course's grading code and ignores the kernel's ``PYTHON*`` variables and user site.
"""
from __future__ import annotations

import io
import linecache
import os
import socket
import subprocess
import sys
import types

from grading.judge.protocol import read_message, write_message
from grading.paths import COURSE_ROOT, isolated_module

#: Environment variables a judge started from a kernel inherits (nothing else: no LD_PRELOAD...).
_ENV_KEEP = ("PATH", "HOME", "USER", "LANG", "TMPDIR", "CUDA_VISIBLE_DEVICES", "LABUTILS_START_METHOD")
_ENV_KEEP_PREFIXES = ("LC_", "NCCL_")
#: Largest cell source sent along (characters).
MAX_SOURCE_CHARS = 200_000

_stdio_judge: subprocess.Popen | None = None


class HiddenTestsFailed(AssertionError):
    """Some hidden checks failed; the message says which and why."""

    def _render_traceback_(self):  # IPython: show this line, not the frames of the grader
        return [f"{type(self).__name__}: {self}"]


#: What cloudpickle (3.1 and later) writes as the file name of every code object it sends by value.
_DYNAMIC_CODE = "<dynamic-code>"


#: Packages of the course that the judge's ranks import themselves (never sent by value).
COURSE_PACKAGES = ("labutils", "grading")


def _inside(path: str, folder: str) -> bool:
    return path.startswith(folder.rstrip(os.sep) + os.sep)


def helper_modules(folder: str) -> list:
    """Top-level modules this kernel imported from files in ``folder`` (the notebook's own, its
    working directory): a helper module handed in beside the notebook. The judge's ranks have no
    such file, so ``dumps`` sends them by value, like the cells' code. Not the course's packages,
    nor anything inside the Python installation or environment (a ``.venv`` in the folder)."""
    folder = os.path.realpath(folder)
    environment = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or name == "__main__" or name in COURSE_PACKAGES or not isinstance(path, str):
            continue
        path = os.path.realpath(path)
        if _inside(path, folder) and not any(_inside(path, prefix) for prefix in environment):
            found.append(module)
    return found


def dumps(objects: dict) -> bytes:
    """cloudpickle of ``objects`` (cells' classes and functions by value, and those of the helper
    modules beside the notebook: ``helper_modules``), each code object keeping its file name, the
    cell it came from, which cloudpickle 3.1 replaces with "<dynamic-code>": the judge quotes the
    student's own line of that cell when the code fails or hangs."""
    import cloudpickle

    class KeepCellNames(cloudpickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, types.CodeType):
                constructor, args = self.dispatch_table[types.CodeType](obj)
                return constructor, tuple(obj.co_filename if arg == _DYNAMIC_CODE else arg for arg in args)
            return super().reducer_override(obj)

    helpers = helper_modules(os.getcwd())
    for module in helpers:
        cloudpickle.register_pickle_by_value(module)
    try:
        buffer = io.BytesIO()
        KeepCellNames(buffer).dump(objects)
        return buffer.getvalue()
    finally:
        for module in helpers:
            cloudpickle.unregister_pickle_by_value(module)


def _cell_sources() -> dict:
    """{filename: source} of the code cells this kernel has run (they have no file on disk) and of
    the helper modules beside the notebook (the ranks have no such file)."""
    sources = {}
    for filename, entry in list(linecache.cache.items()):
        if len(entry) == 4 and not os.path.exists(filename):
            sources[filename] = "".join(entry[2])[:MAX_SOURCE_CHARS]
    for module in helper_modules(os.getcwd()):
        try:
            with open(module.__file__, encoding="utf-8", errors="replace") as f:
                sources[module.__file__] = f.read(MAX_SOURCE_CHARS)
        except OSError:
            continue
    return sources


def _judge_environment() -> dict:
    return {k: v for k, v in os.environ.items() if k in _ENV_KEEP or k.startswith(_ENV_KEEP_PREFIXES)}


def _start_stdio_judge() -> subprocess.Popen:
    command = isolated_module("grading.judge.server", "--stdio",
                              "--rank-timeout", os.environ.get("LAB_JUDGE_RANK_TIMEOUT", "60"))
    if os.environ.get("LAB_JUDGE_LOG"):
        command += ["--log", os.environ["LAB_JUDGE_LOG"]]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=_judge_environment(), cwd=COURSE_ROOT, start_new_session=True)


def _ask_stdio_judge(header: dict, blob: bytes) -> dict:
    global _stdio_judge
    if _stdio_judge is None or _stdio_judge.poll() is not None:
        _stdio_judge = _start_stdio_judge()
    try:
        write_message(_stdio_judge.stdin, header, blob)
        reply, _ = read_message(_stdio_judge.stdout)
        return reply
    except BaseException:  # interrupted or broken: never reuse a judge whose replies are out of step
        _stdio_judge.kill()
        _stdio_judge.wait()
        _stdio_judge = None
        raise


def _ask_service(path: str, header: dict, blob: bytes) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        stream = conn.makefile("rwb")
        write_message(stream, header, blob)
        reply, _ = read_message(stream)
        return reply


def judge(lab: str, test: str, **objects) -> None:
    """Run the hidden test ``test`` of ``lab`` on ``objects``; print the verdict, raise if it failed."""
    try:
        blob = dumps(objects)
    except Exception as exc:
        raise HiddenTestsFailed(f"{', '.join(objects)} could not be sent to the grader: {exc}") from None
    header = {"lab": lab, "test": test, "names": sorted(objects), "sources": _cell_sources()}
    path = os.environ.get("LAB_JUDGE_SOCKET")
    verdict = _ask_service(path, header, blob) if path else _ask_stdio_judge(header, blob)
    for line in verdict["lines"]:
        print(line)
    if not verdict["passed"]:
        raise HiddenTestsFailed(verdict["summary"])
