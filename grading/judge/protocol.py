"""The judge's wire format: a JSON header and an opaque blob, length-prefixed.

    frame = header length (4 bytes, big-endian) | blob length (8 bytes) | header (UTF-8 JSON) | blob

Requests carry {"lab", "test", "names", "sources"} and the submission's objects as a
cloudpickle blob; the judge never unpickles that blob itself, it only forwards it to the
ranks. Replies and control messages are JSON only (empty blob). Nothing in this format
is ever unpickled in the judge's main process.
"""
from __future__ import annotations

import json
import struct

_PREFIX = struct.Struct(">IQ")
#: Largest header accepted (bytes): the cells' sources travel in it.
MAX_HEADER_BYTES = 32 * 1024 * 1024
#: Largest blob accepted (bytes): the pickled classes and functions of a submission.
MAX_BLOB_BYTES = 256 * 1024 * 1024


class ProtocolError(RuntimeError):
    """The other side sent something that is not a frame, or went away mid-frame."""


def write_message(stream, header: dict, blob: bytes = b"") -> None:
    """Write one frame to a binary file-like ``stream`` and flush it."""
    encoded = json.dumps(header).encode("utf-8")
    stream.write(_PREFIX.pack(len(encoded), len(blob)) + encoded + blob)
    stream.flush()


def _read_exactly(stream, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise EOFError("the other side closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(stream) -> tuple[dict, bytes]:
    """Read one frame; raises EOFError at a clean end of stream, ProtocolError on garbage."""
    prefix = stream.read(_PREFIX.size)
    if not prefix:
        raise EOFError("the other side closed the connection")
    if len(prefix) < _PREFIX.size:
        prefix += _read_exactly(stream, _PREFIX.size - len(prefix))
    header_size, blob_size = _PREFIX.unpack(prefix)
    if header_size > MAX_HEADER_BYTES or blob_size > MAX_BLOB_BYTES:
        raise ProtocolError(f"frame too large: header {header_size} B, blob {blob_size} B")
    try:
        header = json.loads(_read_exactly(stream, header_size).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("the header must be a JSON object")
    return header, _read_exactly(stream, blob_size)
