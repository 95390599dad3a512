"""Stop signals while training: SIGTERM and SIGHUP are handled like Ctrl-C.

A batch scheduler (SIGTERM before SIGKILL), a closed terminal (SIGHUP) and Ctrl-C (SIGINT) each
raise :class:`~grpolab.errors.Interrupted` in the trainer's main thread, so the run stops the way
Ctrl-C stops it: the files written so far stay consistent (checkpoints are written atomically,
the run lock is released) and the command prints the resume hint. Before, SIGTERM and SIGHUP
ended training without a word. The handlers are marked (``grpolab_stop``) so that a user reward
that raises ``KeyboardInterrupt`` itself is told apart from a real signal
(:func:`grpolab.rewards.user.guarded`).
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from grpolab.errors import Interrupted

__all__ = ["STOP_SIGNALS", "stop_signals"]

#: the signals that stop training like Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


def _raise_interrupted(signum, _frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


_raise_interrupted.grpolab_stop = True  # type: ignore[attr-defined]


@contextmanager
def stop_signals() -> Iterator[None]:
    """Within the block, :data:`STOP_SIGNALS` raise :class:`Interrupted` (main thread only; elsewhere
    Python cannot install handlers and the block runs unchanged). The previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_interrupted) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
