"""The host's side of a sandbox's report channel: length-prefixed JSON frames, read with caps.

A sandboxed process writes frames (4-byte big-endian length + ASCII JSON) on fd 4; the host
keeps at most ``cap`` bytes in all (past it the sandbox is killed: ``output_limit``) and parses
each frame with :func:`json.loads` into plain data. Nothing here interprets text a program
printed: stdout and stderr are only counted and kept (truncated) for the record.
"""

from __future__ import annotations

import json

__all__ = ["FrameReader", "MAX_FRAME"]

#: Largest single frame, bytes (a bigger one ends the reading: the rest is ignored).
MAX_FRAME = 16 << 20


class FrameReader:
    """Accumulate bytes; ``records`` holds every complete frame decoded (malformed ones are
    counted in ``malformed`` and skipped)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.total = 0
        self.buf = bytearray()
        self.records: list = []
        self.malformed = 0
        self.broken = False

    def feed(self, chunk: bytes) -> bool:
        """Add ``chunk``; False once the total passed ``cap`` (the caller kills the sender)."""
        self.total += len(chunk)
        if self.total > self.cap:
            return False
        if self.broken:
            return True
        self.buf += chunk
        while len(self.buf) >= 4:
            n = int.from_bytes(self.buf[:4], "big")
            if n > MAX_FRAME:
                self.broken = True
                self.buf.clear()
                break
            if len(self.buf) < 4 + n:
                break
            frame = bytes(self.buf[4:4 + n])
            del self.buf[:4 + n]
            try:
                self.records.append(json.loads(frame.decode("ascii")))
            except (ValueError, RecursionError, MemoryError):
                self.malformed += 1
        return True
