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
    counted in ``malformed`` and skipped).

    Only what a verdict needs is parsed: at most ``max_records`` frames (later ones are
    counted, never decoded), and before each frame is decoded its lists/objects and items are
    counted on the raw bytes against ``max_items`` for the whole report, so that decoding can
    never cost the host more than those bounds. Past ``cap`` bytes or ``max_items`` items,
    ``feed`` returns False and ``over`` says why (the caller kills the sender: the program's
    failure, never the verifier's)."""

    def __init__(self, cap: int, max_records: int | None = None,
                 max_items: int | None = None) -> None:
        self.cap = cap
        self.max_records = max_records
        self.items_left = max_items
        self.total = 0
        self.buf = bytearray()
        self.records: list = []
        self.malformed = 0
        self.broken = False
        self.over = ""

    def feed(self, chunk: bytes) -> bool:
        """Add ``chunk``; False once the total passed ``cap`` or the items passed their
        bound (the caller kills the sender)."""
        self.total += len(chunk)
        if self.total > self.cap:
            self.over = self.over or f"report over {self.cap} bytes"
            return False
        if self.broken or self.over:
            return not self.over
        self.buf += chunk
        while len(self.buf) >= 4:
            if self.max_records is not None and len(self.records) >= self.max_records:
                self.broken = True  # nothing past what the verdict needs is parsed
                self.buf.clear()
                break
            n = int.from_bytes(self.buf[:4], "big")
            if n > MAX_FRAME:
                self.broken = True
                self.buf.clear()
                break
            if len(self.buf) < 4 + n:
                break
            frame = bytes(self.buf[4:4 + n])
            del self.buf[:4 + n]
            if self.items_left is not None:
                self.items_left -= 1 + frame.count(b",") + frame.count(b"[") + frame.count(b"{")
                if self.items_left < 0:
                    self.over = "report over its item bound"
                    return False
            try:
                self.records.append(json.loads(frame.decode("ascii")))
            except (ValueError, RecursionError, MemoryError):
                self.malformed += 1
        return True
