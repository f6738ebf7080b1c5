"""What a student reads when ranks disagree: an early word about ranks left in a collective,
gloo's own explanation of a mismatch, tracebacks without the launcher's frames; and ranks
that follow the caller's sys.path."""
from __future__ import annotations

import os
import sys
import time

import pytest
import torch
import torch.distributed as dist

import labutils
from labutils import RankDiedError, RankTimeoutError
from labutils.ranks._render import shorten

pytestmark = pytest.mark.usefixtures("no_leftover_processes")

LABUTILS_DIR = os.path.dirname(labutils.__file__)


class _TimedStream:
    """A stdout that remembers when each piece of text was written (time.monotonic() s)."""

    def __init__(self):
        self.writes: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.writes.append((time.monotonic(), text))
        return len(text)

    def flush(self) -> None:
        pass

    def first(self, needle: str) -> tuple[float, str] | None:
        return next(((t, text) for t, text in self.writes if needle in text), None)


@pytest.mark.usefixtures("lenient_collectives")
def test_ranks_left_in_a_collective_are_named_long_before_the_timeout(monkeypatch):
    def only_rank_0_reduces():
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))

    with labutils.Pool(2) as pool:
        pool.run(os.getpid)  # ranks up: what is timed is the call
        stream = _TimedStream()
        monkeypatch.setattr(sys, "stdout", stream)
        start = time.monotonic()
        with pytest.raises(RankTimeoutError) as info:
            pool.run(only_rank_0_reduces, timeout=20)
        monkeypatch.undo()
    notice = stream.first("still in all_reduce")
    assert notice is not None, stream.writes
    arrived_after_s, text = notice
    assert arrived_after_s - start < 12.0  # at a check 0.5, 2 or 8 s after rank 1 returned, not at the 20 s deadline
    assert "rank 1 finished; rank 0 is still in all_reduce (waiting up to 20 s" in text
    assert "timeout=" in text and "LABUTILS_TIMEOUT" in text
    assert "(rank 1 had finished)" in str(info.value)


def test_no_notice_when_ranks_merely_finish_at_different_times(capsys):
    def uneven():
        time.sleep(1.5 * dist.get_rank())  # rank 1 computes longer, in no collective
        return dist.get_rank()

    with labutils.Pool(2) as pool:
        assert pool.run(uneven) == [0, 1]
    assert "still in" not in capsys.readouterr().out


@pytest.mark.usefixtures("lenient_collectives")
def test_a_size_mismatch_shows_gloos_own_explanation_in_whole_words():
    def mismatch():
        t = torch.ones(4 if dist.get_rank() == 0 else 8)
        dist.all_reduce(t)

    with pytest.raises(RankDiedError) as info:
        labutils.launch(mismatch, 2, timeout=60)
    text = str(info.value)
    assert "SIGABRT" in text
    assert "Is there a distributed collective mismatch in your code?" in text
    assert "8 vs 4" in text and "Received data size doesn't match expected size" in text
    for line in text.splitlines():  # every line ends on a whole word or a marked cut
        assert line.rstrip().endswith((".", "?", "...", ":", ")")) or line.startswith("    "), line


def test_shorten_cuts_between_words_only():
    text = "This is typically caused by a remote worker hanging or bugs in the application. " * 3
    short = shorten(text, 100)
    assert len(short) <= 104 and short.endswith(" ...")
    assert text.startswith(short.removesuffix(" ...")) and text[len(short) - 4] == " "
    assert shorten("short message") == "short message"


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    InteractiveShell.clear_instance()
    shell = InteractiveShell.instance()
    yield shell
    if "distributed_shutdown" in shell.magics_manager.magics["line"]:
        shell.run_line_magic("distributed_shutdown", "")
    InteractiveShell.clear_instance()


def test_the_traceback_a_cell_shows_has_no_launcher_frame(shell, capsys):
    shell.run_cell("import labutils, torch.distributed as dist\n"
                   "def fail():\n    if dist.get_rank() == 1:\n        raise ValueError('only rank 1 is unhappy')\n",
                   store_history=True)
    shell.run_cell("with labutils.Pool(2) as pool:\n    pool.run(fail)\n", store_history=True)
    shell.run_line_magic("load_ext", "labutils")
    shell.run_cell("%%distributed -n 2 --timeout 30\nimport os\nif rank == 0:\n    os._exit(3)\n"
                   "dist.barrier()\n", store_history=True)
    shown = capsys.readouterr().out
    assert "raise ValueError('only rank 1 is unhappy')" in shown  # the rank's frame
    assert "pool.run(fail)" in shown  # the cell's own line
    assert "ValueError: only rank 1 is unhappy" in shown and "rank 1 of 2" in shown
    assert "RankDiedError: rank 0 died while running: exited with code 3" in shown
    assert LABUTILS_DIR not in shown and "labutils/" not in shown
    assert "interactiveshell.py" not in shown and "skipping hidden" not in shown


def test_ranks_restart_with_the_callers_new_sys_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "labutils_test_added_module.py").write_text("ANSWER = 42\n")

    def use_added_module():
        import labutils_test_added_module

        return labutils_test_added_module.ANSWER

    with labutils.Pool(2) as pool:
        pids = pool.run(os.getpid)
        monkeypatch.syspath_prepend(str(tmp_path))  # as a notebook does sys.path.append(...)
        assert pool.run(use_added_module) == [42, 42]
        assert pool.restarts == 1 and not set(pool.pids()) & set(pids)
        assert pool.run(os.getpid) == pool.pids()  # unchanged since: no second restart
    out = capsys.readouterr().out
    assert out.count("sys.path changed since the ranks started") == 1
    assert "starting 2 fresh ranks" in out
