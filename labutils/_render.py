"""What the caller shows of a rank: its exception, its exit status, the stack where it hangs.

Pure functions over text and bytes; the pool calls them when a rank fails.
"""
from __future__ import annotations

import linecache
import os
import re
import signal

from labutils.errors import RankError, RemoteTraceback

_SIGNAL_NAMES = {signal.SIGKILL: "SIGKILL", signal.SIGSEGV: "SIGSEGV (segmentation fault)",
                 signal.SIGABRT: "SIGABRT (abort)", signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT",
                 signal.SIGBUS: "SIGBUS (bus error)", signal.SIGFPE: "SIGFPE"}
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_LAUNCHER_FILES = (os.path.join("labutils", "_worker.py"), os.path.join("labutils", "_template.py"))


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
    """The rank's exception (a ``labutils.messages.Failed``) in the caller: original type if
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
        if not m or m["file"].endswith(_LAUNCHER_FILES):
            continue
        out.append(f'    File "{m["file"]}", line {m["line"]}, in {m["func"]}')
        source = linecache.getline(m["file"], int(m["line"])).strip()
        if source:
            out.append(f"        {source}")
    return "\n".join(out)
