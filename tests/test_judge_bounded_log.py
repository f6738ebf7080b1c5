"""The judge's log keeps a bounded amount of each submission's output, and all of its own lines."""
from __future__ import annotations

import os
import subprocess
import sys

from grading.judge.bounded_log import MAX_SUBMISSION_LOG_CHARS, BoundedLog

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_each_section_keeps_its_first_characters_and_says_what_it_dropped(tmp_path):
    path = tmp_path / "judge.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    log = BoundedLog(fd, limit=10)
    log.start("submission a")
    log.write("0123456")
    log.write("789abcdef\n")
    log.note("[judge] test_f: passed")
    log.start("submission b")
    log.write("short\n")
    log.finish()
    log.flush()
    os.close(fd)
    assert path.read_text().splitlines() == [
        "[judge] --- submission a ---", "0123456789[judge] test_f: passed",
        "[judge] 7 more characters of output dropped (the log keeps 10 per submission)",
        "[judge] --- submission b ---", "short"]


FLOOD = """
import sys, labutils
from grading.judge.server import _detach_output

def flood():
    for _ in range(3000):
        print("x" * 1000)

reply, log = _detach_output(sys.argv[1])
log.start("submission flood")
labutils.launch(flood, 2, backend="gloo", timeout=120)
log.note("[judge] test_flood: passed")
log.finish()
labutils.shutdown()
"""


def test_ranks_printing_without_end_leave_the_judges_log_its_bound(tmp_path):
    path = tmp_path / "judge.log"
    done = subprocess.run([sys.executable, "-c", FLOOD, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    text = path.read_text()
    assert "[judge] test_flood: passed" in text and "more characters of output dropped" in text
    assert len(text) < MAX_SUBMISSION_LOG_CHARS + 10_000, f"{len(text)} characters where 2 ranks printed 6 MB"
