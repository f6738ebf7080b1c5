"""The caller's links to a pool's ranks: their processes, sockets and output.

``RankLinks`` owns what one set of running ranks needs in the caller: the starter that made
them (and reports their exits), a selector over their channels (control, stdout, stderr per
rank), the temporary folder of their socket and stack files. It relays output, reads
control messages, asks stuck ranks for their stacks and kills them all.
"""
from __future__ import annotations

import collections
import os
import selectors
import signal
import socket
import sys
import time

from labutils.ranks import _wire
from labutils.ranks._launch_folder import LaunchFolder
from labutils.ranks._render import cell_names, main_thread_stack
from labutils.ranks._messages import RankHello

#: Seconds a stuck rank gets to write its stack after SIGUSR1 (the wait ends as soon as every stack
#: is in: only a rank the machine's load keeps from running for a while uses it all).
STACK_DUMP_WAIT_S = 5.0
#: Last lines of each rank's stderr kept to explain its death (gloo's and NCCL's messages).
STDERR_TAIL_LINES = 40


class RankLink:
    """The caller's view of one rank: its sockets, pid and partial output lines."""

    def __init__(self, rank: int):
        self.rank = rank
        self.pid: int | None = None
        self.main_thread: int | None = None
        self.ctrl: socket.socket | None = None
        self.out: socket.socket | None = None
        self.err: socket.socket | None = None
        self.reader = _wire.FrameReader()
        self.partial = {"out": b"", "err": b""}
        self.pending: list = []  # control messages that arrived before anyone asked for them
        self.ctrl_closed = False
        self.output_closed: set[str] = set()  # "out", "err" once the rank closed them
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)


class RankLinks:
    """Every rank of one pool, seen from the caller (empty ``ranks`` when none run)."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.ranks: list[RankLink] = []
        self.starter = None
        self.selector: selectors.BaseSelector | None = None
        self.listener: socket.socket | None = None
        self.folder: LaunchFolder | None = None  # this start's socket and stack files

    def exit_status(self, rank: int):
        """(exitcode, signal) of ``rank`` once the starter has seen it end, else None."""
        return self.starter.exit_status(self.ranks[rank].pid)

    # ----- connecting --------------------------------------------------------------
    def connect(self, token: str, timeout_s: float, on_starter_event) -> None:
        """Accept the 3 channels of every rank (``token`` proves they are ours) within ``timeout_s``.

        ``on_starter_event()`` runs whenever the starter reports news (a rank may have died).
        """
        deadline = time.monotonic() + timeout_s
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.starter.events_fileno(), selectors.EVENT_READ, ("events", None))
        self.selector.register(self.listener, selectors.EVENT_READ, ("listen", None))
        expected = 3 * self.world_size
        connected = 0
        while connected < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"ranks did not connect within {timeout_s:.0f} s")
            for key, _ in self.selector.select(remaining):
                if key.data[0] == "events":
                    self.starter.read_events()
                    on_starter_event()
                elif key.data[0] == "listen" and self._accept_channel(token):
                    connected += 1
        self.selector.unregister(self.listener)
        self.listener.close()
        self.listener = None

    def _accept_channel(self, token: str) -> bool:
        """Take one connection: True if it was one of our ranks' channels."""
        conn, _ = self.listener.accept()
        conn.settimeout(10)
        hello = _wire.recv(conn)
        conn.settimeout(None)
        if type(hello) is not RankHello or hello.token != token:
            conn.close()
            return False
        rank = self.ranks[hello.rank]
        setattr(rank, hello.channel, conn)
        self.selector.register(conn, selectors.EVENT_READ, (hello.channel, rank))
        return True

    # ----- events --------------------------------------------------------------------
    def handle_event(self, key, waiting) -> list:
        """Process one ready socket; return (rank, message) pairs from control channels."""
        kind, rank = key.data
        if kind == "events":
            self.starter.read_events()
            return []
        try:
            data = key.fileobj.recv(1 << 16, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if kind == "ctrl":
            if not data:
                self.selector.unregister(key.fileobj)
                rank.ctrl_closed = True
                if rank.rank in waiting:
                    self.await_exit_report(rank)
                return []
            return [(rank.rank, m) for m in rank.reader.feed(data)]
        if not data:
            self.selector.unregister(key.fileobj)
            rank.output_closed.add(kind)
            return []
        self.relay(rank, kind, data)
        return []

    def take_news(self) -> None:
        """Take in what arrived since the last call: exit reports, closed channels, stray output."""
        try:
            for key, _ in self.selector.select(0):
                for rank, message in self.handle_event(key, set()):
                    self.ranks[rank].pending.append(message)
        except (OSError, RuntimeError):
            pass  # the template has gone: the pool's health check sees it

    def await_exit_report(self, rank: RankLink, wait_s: float = 2.0) -> None:
        """A rank closed its control channel: wait briefly until its exit status is known."""
        deadline = time.monotonic() + wait_s
        sel = selectors.DefaultSelector()
        sel.register(self.starter.events_fileno(), selectors.EVENT_READ)
        try:
            while self.starter.exit_status(rank.pid) is None and time.monotonic() < deadline:
                if sel.select(max(0.0, deadline - time.monotonic())):
                    self.starter.read_events()
        finally:
            sel.close()

    def dead_ranks(self, among) -> list[int]:
        """The ranks of ``among`` whose process has ended, in order."""
        return sorted(r for r in among if self.ranks and self.exit_status(r) is not None)

    def all_exited(self) -> bool:
        return all(self.starter.exit_status(r.pid) is not None for r in self.ranks if r.pid)

    # ----- output --------------------------------------------------------------------
    def relay(self, rank: RankLink, kind: str, data: bytes) -> None:
        """Print complete lines from a rank, prefixed with its number."""
        text = rank.partial[kind] + data
        *lines, rank.partial[kind] = text.split(b"\n")
        if lines:
            stream = sys.stdout if kind == "out" else sys.stderr
            prefix = f"[rank {rank.rank}] "
            texts = [line.decode("utf-8", "replace") for line in lines]
            stream.write("".join(prefix + text + "\n" for text in texts))
            stream.flush()
            if kind == "err":
                rank.stderr_tail.extend(texts)

    def await_output_end(self, ranks: list[int], wait_s: float = 1.0) -> None:
        """Relay the output of ranks that have died until they close it (their last words,
        such as gloo's explanation of an abort, arrive after their exit report), or ``wait_s``."""
        deadline = time.monotonic() + wait_s
        def ended(rank: RankLink) -> bool:
            return all(kind in rank.output_closed or getattr(rank, kind) is None for kind in ("out", "err"))

        while self.selector is not None and time.monotonic() < deadline:
            if all(ended(self.ranks[r]) for r in ranks):
                break
            for key, _ in self.selector.select(max(0.0, deadline - time.monotonic())):
                if key.data[0] == "listen":  # still connecting: a rank that died has no channel to read
                    time.sleep(0.01)
                    continue
                for rank, message in self.handle_event(key, set()):
                    self.ranks[rank].pending.append(message)

    def drain_output(self) -> None:
        """Relay whatever output is already waiting, and any unfinished last line."""
        if self.selector is None:
            return
        while True:
            events = [k for k, _ in self.selector.select(0) if k.data[0] in ("out", "err")]
            if not events:
                break
            for key in events:
                self.handle_event(key, set())
        for r in self.ranks:
            for kind in ("out", "err"):
                if r.partial[kind]:
                    self.relay(r, kind, b"\n")

    def stacks(self, ranks: list[int]) -> dict[int, str]:
        """Ask stuck ranks for their Python stacks (faulthandler on SIGUSR1)."""
        paths = {r: self.folder.stack_file(r) for r in ranks}
        offsets = {r: os.path.getsize(p) if os.path.exists(p) else 0 for r, p in paths.items()}
        self.starter.kill([self.ranks[r].pid for r in ranks], signal.SIGUSR1)
        deadline = time.monotonic() + STACK_DUMP_WAIT_S
        texts: dict[int, str] = {}
        while time.monotonic() < deadline and len(texts) < len(ranks):
            time.sleep(0.05)
            for r, path in paths.items():
                if r in texts:
                    continue
                try:
                    with open(path) as f:
                        f.seek(offsets[r])
                        text = f.read()
                except OSError:
                    continue
                if text.endswith("\n") and "File" in text:
                    time.sleep(0.05)  # let the dump of every thread finish
                    with open(path) as f:
                        f.seek(offsets[r])
                        texts[r] = f.read()
        return {r: cell_names(main_thread_stack(t, self.ranks[r].main_thread)) for r, t in texts.items()}

    # ----- ending ----------------------------------------------------------------------
    def kill(self) -> None:
        """Kill every rank, wait until the starter has seen them exit, release resources."""
        if self.starter is not None and self.ranks:
            self.starter.kill([r.pid for r in self.ranks if r.pid])
            deadline = time.monotonic() + 5.0
            sel = selectors.DefaultSelector()
            sel.register(self.starter.events_fileno(), selectors.EVENT_READ)
            try:
                while not self.all_exited() and time.monotonic() < deadline:
                    if sel.select(0.1):
                        self.starter.read_events()
            except (OSError, RuntimeError):
                pass  # the template is gone, and its ranks with it
            finally:
                sel.close()
        for r in self.ranks:
            for sock in (r.ctrl, r.out, r.err):
                if sock is not None:
                    sock.close()
        if self.selector is not None:
            self.selector.close()
            self.selector = None
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.folder is not None:
            self.folder.remove()
            self.folder = None
        self.ranks = []
