"""What the nightly run shows while it runs: one status line on a terminal, one line per result otherwise."""
from __future__ import annotations

import os
import threading
import time

from grading.nightly.report import Result


class Progress:
    """What is running, done and failed. On a terminal one status line is redrawn every second;
    otherwise one line per finished notebook or lab."""

    def __init__(self, stream, total: int):
        self.stream, self.total = stream, total
        self.interactive = bool(getattr(stream, "isatty", lambda: False)())
        self.running: dict[str, float] = {}
        self.done = self.failed = 0
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True) if self.interactive else None
        if self._ticker is not None:
            self._ticker.start()

    def started(self, label: str) -> None:
        with self._lock:
            self.running[label] = time.monotonic()
            self._redraw()

    def finished(self, label: str, results: list[Result]) -> None:
        with self._lock:
            self.running.pop(label, None)
            self.done += 1
            self.failed += any(not result.ok for result in results)
            for result in results:
                self._clear()
                status = result.status if result.ok else result.status.upper()
                error = f"  {result.error}" if result.error else ""
                self.stream.write(f"{status:<9}  {result.name}  {result.duration_s:.1f} s{error}\n")
            self._redraw()
            self.stream.flush()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self._clear()
            self.stream.flush()

    def _tick(self) -> None:
        while not self._closed.wait(1.0):
            with self._lock:
                self._redraw()

    def _clear(self) -> None:
        if self.interactive:
            self.stream.write("\r\x1b[K")

    def _redraw(self) -> None:
        if not self.interactive or self._closed.is_set():
            return
        now = time.monotonic()
        running = ", ".join(f"{label} ({now - start:.0f} s)" for label, start in self.running.items())
        line = f"[{self.done}/{self.total} done, {self.failed} failed] running: {running or '-'}"
        # a line wider than the terminal wraps, and "\r" then clears only its last part
        self.stream.write("\r\x1b[K" + _fit(line, self._columns()))
        self.stream.flush()

    def _columns(self) -> int:
        """The terminal's width; 80 when unknown (not a file, or a pseudo-terminal reporting 0)."""
        try:
            return os.get_terminal_size(self.stream.fileno()).columns or 80
        except (AttributeError, OSError, ValueError):
            return 80


def _fit(line: str, columns: int) -> str:
    """``line`` cut to ``columns - 1`` characters, ending with '...' when cut."""
    width = max(columns - 1, 10)
    return line if len(line) <= width else line[:width - 3] + "..."
