"""A verifier worker process for :func:`grpolab.rewards.score_batch` (``python -m`` this module).

Reads length-prefixed pickles ``(name, completion, reference, options)`` from stdin, answers each
with a pickled ``(score, info)`` from ``safe_score`` (its time limit applies: this is the main
thread), until stdin closes. Only the parent, a trusted process, writes to it.
"""

from __future__ import annotations

import os
import pickle
import struct
import sys


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        b = os.read(fd, n)
        if not b:
            raise EOFError
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def main() -> None:
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # stray prints from verifiers must not corrupt the protocol
    import grpolab.rewards  # noqa: F401 - registers the built-in rewards
    from grpolab.rewards.base import safe_score

    while True:
        try:
            (n,) = struct.unpack(">Q", _read_exact(rfd, 8))
            name, completion, reference, options = pickle.loads(_read_exact(rfd, n))
        except EOFError:
            return
        res = safe_score(name, completion, reference, **options)
        try:
            data = pickle.dumps((res.score, res.info))
        except Exception as exc:  # noqa: BLE001 - unpicklable info
            data = pickle.dumps((res.score, {"error": f"unpicklable info: {exc}"}))
        data = struct.pack(">Q", len(data)) + data
        while data:
            data = data[os.write(wfd, data):]


if __name__ == "__main__":
    sys.exit(main())
