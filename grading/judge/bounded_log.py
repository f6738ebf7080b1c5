"""The judge's log with a size bound per submission.

What a submission's ranks print reaches the judge's ``sys.stdout`` and ``sys.stderr`` (labutils
relays every line, prefixed with its rank), and from there the judge's log
(``logs/LAB/judge-N.log``). A submission that prints without end would grow that file without
end, for every submission the judge serves after it too. ``BoundedLog`` keeps the first
``limit`` characters of what is written between two ``start`` calls (one submission), counts
the rest and says how much it dropped; the judge's own lines (``note``) are always written.
"""
from __future__ import annotations

import io
import threading

#: Characters of output kept per submission in the judge's log (the kernels' logs keep a MiB too).
MAX_SUBMISSION_LOG_CHARS = 2**20


class BoundedLog(io.TextIOBase):
    """A line-buffered UTF-8 text stream onto file descriptor ``fd`` that keeps at most ``limit``
    characters of ``write`` per section (``start`` opens one); thread-safe (the ranks' output is
    relayed from labutils' threads)."""

    def __init__(self, fd: int, limit: int = MAX_SUBMISSION_LOG_CHARS):
        super().__init__()
        self._out = open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
        self._lock = threading.Lock()
        self.limit = limit
        self._left, self._dropped = limit, 0

    @property
    def encoding(self) -> str:
        return self._out.encoding

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            kept = text[:self._left]
            self._left -= len(kept)
            self._dropped += len(text) - len(kept)
            if kept:
                self._out.write(kept)
        return len(text)

    def note(self, line: str) -> None:
        """Write the judge's own ``line`` whatever the section has used."""
        with self._lock:
            self._out.write(line.rstrip("\n") + "\n")
            self._out.flush()

    def start(self, title: str) -> None:
        """Close the current section (saying what it dropped) and open one titled ``title``."""
        self.finish()
        self.note(f"[judge] --- {title} ---")

    def finish(self) -> None:
        """Close the current section: a line with the characters it dropped, if any; a fresh budget."""
        with self._lock:
            dropped, self._left, self._dropped = self._dropped, self.limit, 0
        if dropped:
            self.note(f"[judge] {dropped} more characters of output dropped (the log keeps {self.limit} per submission)")

    def flush(self) -> None:
        self._out.flush()

    def fileno(self) -> int:
        return self._out.fileno()
