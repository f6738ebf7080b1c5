"""What the caller shows of a rank: its exception, its exit status, the stack where it hangs.

Pure functions over text and bytes; the pool calls them when a rank fails.
"""
from __future__ import annotations

import linecache
import os
import re
import signal

from labutils.ranks.errors import RankError, RemoteTraceback

_SIGNAL_NAMES = {signal.SIGKILL: "SIGKILL", signal.SIGSEGV: "SIGSEGV (segmentation fault)",
                 signal.SIGABRT: "SIGABRT (abort)", signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT",
                 signal.SIGBUS: "SIGBUS (bus error)", signal.SIGFPE: "SIGFPE"}
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LAUNCHER_FILES = (os.path.join("labutils", "_worker.py"), os.path.join("labutils", "_template.py"))
#: The caller's side of the launcher: frames of these files are hidden from a rank's error.
_CALLER_LAUNCHER_FILES = tuple(os.path.join(os.path.dirname(__file__), name) for name in (
    "launch.py", "pool.py", "_replies.py", "_ranklinks.py", "_render.py", "_starters.py", "magic.py",
    "call_args.py", "_wire.py"))
_DISTRIBUTED_FRAME = re.compile(r'File "[^"]*[/\\]torch[/\\]distributed[/\\][^"]*", line \d+, in (\w+)')
#: Lines of a dead rank's stderr that explain why it died (gloo's and NCCL's own words).
_EXPLAINING = re.compile(r"terminate called|what\(\)|mismatch|enforce fail|NCCL WARN|Error|error:")
#: "[enforce fail at /__w/pytorch/.../pair.cc:456]", "[/__w/pytorch/.../pair.cc:537]": where
#: torch was built, not where the student's code is; only the file name and line are kept.
_BUILD_PATH = re.compile(r"\[(enforce fail at )?/[^\]\s]*/([^/\]\s]+:\d+)\]")


def describe_status(exitcode, sig) -> str:
    """"exited with code 3" or "killed by signal SIGSEGV (segmentation fault)"."""
    if sig is not None:
        return f"killed by signal {_SIGNAL_NAMES.get(sig, sig)}"
    return f"exited with code {exitcode}"


def short_type_name(type_name: str) -> str:
    """"ValueError" for "builtins.ValueError", the qualified name otherwise."""
    return type_name.removeprefix("builtins.")


def cell_names(text: str) -> str:
    """Name notebook cells in a rank's traceback as IPython does ("Cell In[3]"), not by temp file."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
        names = shell.compile._filename_map if shell is not None else {}
    except (ImportError, AttributeError):
        return text
    for filename, number in names.items():
        text = text.replace(f'File "{filename}"', f"Cell In[{number}]")
    return text


def rebuild_exception(rank: int, world_size: int, failed):
    """The rank's exception (a ``labutils.ranks._messages.Failed``) in the caller: original type if
    possible, else RankError.

    A rank's ``SystemExit`` or ``KeyboardInterrupt`` becomes a ``RankError``: re-raised as
    such it would end the caller's script, or read as an interrupt of the caller.
    """
    import cloudpickle

    tb_text = cell_names(failed.traceback)
    exc = None
    if failed.exc_bytes is not None:
        try:
            exc = cloudpickle.loads(failed.exc_bytes)
        except Exception:
            exc = None
    if not isinstance(exc, Exception):
        exc = RankError(f"rank {rank} raised {short_type_name(failed.type_name)}: {failed.message}", rank, tb_text)
    exc.rank = rank
    exc.remote_traceback = tb_text
    exc.__cause__ = RemoteTraceback(f"on rank {rank} of {world_size}:\n{tb_text}")
    exc.__traceback__ = None
    if hasattr(exc, "add_note"):
        exc.add_note(f"[labutils] raised on rank {rank} of {world_size} (its traceback is shown above)")
    return exc


def main_thread_stack(dump: str, main_ident: int | None) -> str:
    """The main thread's part of a faulthandler dump, without launcher frames, with source lines."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", dump.strip())
    chosen = blocks[0]
    if main_ident is not None:
        for block in blocks:
            if f"0x{main_ident:016x}" in block.split("\n", 1)[0]:
                chosen = block
                break
    out = []
    for line in chosen.splitlines()[1:]:
        m = _FRAME.match(line)
        if not m or m["file"].endswith(_LAUNCHER_FILES) or m["file"].startswith("<frozen "):
            continue
        out.append(f'    File "{m["file"]}", line {m["line"]}, in {m["func"]}')
        source = linecache.getline(m["file"], int(m["line"])).strip()
        if source:
            out.append(f"        {source}")
    return "\n".join(out)


def shorten(text: str, limit: int = 300) -> str:
    """``text`` on one line, build paths shortened, cut at a word boundary (never mid-word)
    to at most ``limit`` characters plus " ..."."""
    text = _BUILD_PATH.sub(r"[\1\2]", " ".join(text.split()))
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + " ..."


def ranks_phrase(ranks) -> str:
    """"rank 1" or "ranks 0, 2"."""
    ranks = sorted(ranks)
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def collective_in(stack: str) -> str | None:
    """The torch.distributed function a rank's stack (most recent call first) is inside, or None.

    The outermost such frame is the call the rank's code made (``all_reduce``,
    ``all_gather_object``); torch's logging wrappers and private helpers are skipped.
    """
    for name in reversed(_DISTRIBUTED_FRAME.findall(stack)):
        if name != "wrapper" and not name.startswith("_"):
            return name
    return None


def stderr_explanation(lines, most: int = 6) -> list[str]:
    """The lines of a dead rank's last stderr lines that say why it died, whole, build paths shortened."""
    chosen = [_BUILD_PATH.sub(r"[\1\2]", line.strip()) for line in lines if _EXPLAINING.search(line)]
    return chosen[-most:]


def _is_hidden(frame) -> bool:
    """A frame of the launcher, of IPython's machinery (running a magic), or marked hidden."""
    filename = frame.f_code.co_filename
    return (filename in _CALLER_LAUNCHER_FILES or bool(frame.f_locals.get("__tracebackhide__"))
            or filename.startswith("<decorator-gen-") or f"{os.sep}IPython{os.sep}core{os.sep}" in filename)


def render_without_launcher(exc: BaseException) -> list[str]:
    """The traceback IPython shows for ``exc`` (its ``_render_traceback_``): the rank's
    traceback first, then the caller's frames without the launcher's (nor IPython's own)."""
    import traceback

    parts = []
    if isinstance(exc.__cause__, RemoteTraceback):
        parts += [f"RemoteTraceback {exc.__cause__.args[0]}",
                  "\nThe above exception was the direct cause of the following exception:\n\n"]
    frames = []
    tb = exc.__traceback__
    while tb is not None:
        if not _is_hidden(tb.tb_frame):
            code = tb.tb_frame.f_code
            frames.append(traceback.FrameSummary(code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    if frames:
        summary = traceback.StackSummary.from_list(frames)
        parts.append("Traceback (most recent call last):\n" + "".join(summary.format()))
    parts += traceback.format_exception_only(type(exc), exc)
    return cell_names("".join(parts)).rstrip("\n").split("\n")


def hide_launcher_frames(exc: BaseException) -> BaseException:
    """Make IPython show ``exc`` without the launcher's frames (see ``render_without_launcher``)."""
    exc._render_traceback_ = lambda: render_without_launcher(exc)
    return exc
