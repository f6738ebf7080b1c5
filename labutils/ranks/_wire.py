"""Length-prefixed pickled messages over a stream socket (kernel <-> template <-> ranks).

A frame is a 4-byte big-endian length followed by that many bytes of ``pickle`` data.
The messages are the named types of ``labutils.ranks._messages``; a frame holds one as a plain
tuple, its ``KIND`` first (``Done(3, b"...")`` travels as ``("ok", 3, b"...")``), so
reading a frame rebuilds builtin values only. Payloads that may hold user code
(functions, results) are cloudpickled by the caller and travel as ``bytes`` inside the
message; results with ``dumps_on_cpu``.
"""
from __future__ import annotations

import functools
import io
import pickle
import socket
import struct

from labutils.ranks._messages import BY_KIND

_HEADER = struct.Struct(">I")


def encode(message) -> bytes:
    """A frame's payload: a ``labutils.ranks._messages`` type as (KIND, *fields), anything else as is."""
    kind = getattr(message, "KIND", None)
    return pickle.dumps(message if kind is None else (kind, *message), protocol=pickle.HIGHEST_PROTOCOL)


def decode(data: bytes):
    """The message in a frame's payload, as its named type when it is one."""
    message = pickle.loads(data)
    if type(message) is tuple and message and type(message[0]) is str and message[0] in BY_KIND:
        return tuple.__new__(BY_KIND[message[0]], message[1:])
    return message


def send(sock: socket.socket, message) -> None:
    """Send one message (one of ``labutils.ranks._messages``); blocks until written."""
    data = encode(message)
    sock.sendall(_HEADER.pack(len(data)) + data)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv(sock: socket.socket):
    """Receive one message; raises EOFError when the peer has gone."""
    (length,) = _HEADER.unpack(_recv_exactly(sock, _HEADER.size))
    return decode(_recv_exactly(sock, length))


class FrameReader:
    """Incremental reader for a non-blocking socket: feed what arrived, take whole messages."""

    def __init__(self):
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list:
        self._buffer += data
        messages = []
        while len(self._buffer) >= _HEADER.size:
            (length,) = _HEADER.unpack_from(self._buffer)
            end = _HEADER.size + length
            if len(self._buffer) < end:
                break
            messages.append(decode(bytes(self._buffer[_HEADER.size:end])))
            del self._buffer[:end]
        return messages


@functools.cache
def _cpu_pickler():
    import cloudpickle
    import torch

    class CpuPickler(cloudpickle.Pickler):
        """cloudpickle, with every plain tensor detached and copied to the CPU on the way."""

        def reducer_override(self, obj):
            if type(obj) is torch.Tensor and (obj.device.type != "cpu" or obj.requires_grad):
                return obj.detach().cpu().__reduce_ex__(self.proto)
            return super().reducer_override(obj)

    return CpuPickler


def dumps_on_cpu(obj) -> bytes:
    """cloudpickle ``obj`` with its tensors on the CPU and detached, wherever they sit (lists,
    dicts, state dicts, dataclasses, a module's parameters), so a rank's CUDA result never
    makes the caller touch a GPU. Parameters stay parameters (with their requires_grad)."""
    buffer = io.BytesIO()
    _cpu_pickler()(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()
