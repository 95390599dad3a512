"""Stop signals while training: SIGTERM and SIGHUP are handled like Ctrl-C, and the run keeps its
last completed step.

A batch scheduler (SIGTERM before SIGKILL), a closed terminal (SIGHUP) and Ctrl-C (SIGINT) each
stop the trainer with :class:`~grpolab.errors.Interrupted`; the command prints the resume hint and
exits with 128 + the signal. What happens to the step in progress depends on where the signal
lands (:class:`StopSignals`):

- outside a :meth:`StopSignals.deferred` block (sampling a step, the warm start, the step-0
  evaluation): :class:`Interrupted` is raised at once. Nothing of the step has changed the weights
  yet, so the trainer abandons it and writes a checkpoint of the last completed step
  (:func:`grpolab.train.loop.train`), unless it has one;
- inside one (a step's update, its evaluation and logging, its checkpoint write): the step is
  finished, its checkpoint written, and then :class:`Interrupted` is raised
  (:meth:`StopSignals.raise_pending`). A half-done update or a half-written checkpoint is never
  what the run is left with. One line on stderr says so when the signal arrives.

A second signal stops at once, wherever it lands: checkpoints are written to a temporary folder
and renamed (:func:`grpolab.train.checkpoint.save_checkpoint`), so one cut short is removed and the
checkpoint before it stands; the resume is then exact from there. The handlers are marked
(``grpolab_stop``) so that a user reward that raises ``KeyboardInterrupt`` itself is told apart
from a real signal (:func:`grpolab.rewards.user.guarded`).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from grpolab.errors import Interrupted

__all__ = ["STOP_SIGNALS", "StopSignals", "stop_signals"]

#: the signals that stop training like Ctrl-C
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))


class StopSignals:
    """Where a stop signal may stop the trainer: at once, or at the end of a :meth:`deferred` block.

    Attributes:
        pending: the name of a signal received inside a deferred block (``"SIGTERM"``), else None.
    """

    def __init__(self) -> None:
        self.pending: str | None = None
        self._doing: str | None = None  # what the open deferred block finishes, for the stderr line

    def handle(self, signum: int, _frame) -> None:
        """The signal handler: raise :class:`Interrupted`, or note the signal when a deferred block
        is open and none was noted before (a second signal always raises)."""
        name = signal.Signals(signum).name
        if self._doing is None or self.pending is not None:
            raise Interrupted(name)
        self.pending = name
        # os.write, not print: a handler may run while print holds the stream's lock
        os.write(2, f"{name}: {self._doing}, then stopping; a second signal stops at once\n".encode())

    @contextmanager
    def deferred(self, doing: str) -> Iterator[None]:
        """Within the block a first signal is noted, not raised; ``doing`` says what finishes first
        (e.g. "finishing step 7 and writing its checkpoint"). The caller ends with
        :meth:`raise_pending`."""
        outer = self._doing
        self._doing = doing
        try:
            yield
        finally:
            self._doing = outer

    def raise_pending(self) -> None:
        """Raise :class:`Interrupted` for a signal noted in a deferred block."""
        if self.pending is not None:
            raise Interrupted(self.pending)


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """Within the block, :data:`STOP_SIGNALS` go to a fresh :class:`StopSignals` (main thread only;
    elsewhere Python cannot install handlers: the block runs unchanged, with a :class:`StopSignals`
    that never hears of a signal). The previous handlers come back after."""
    stops = StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return

    def handler(signum, frame) -> None:
        stops.handle(signum, frame)

    handler.grpolab_stop = True  # type: ignore[attr-defined]
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield stops
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
