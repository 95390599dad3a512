"""``rollout.user_reward_process``: the rewards named in a config run in one worker process.

In-process, :func:`grpolab.rewards.user.guarded` already turns ``sys.exit`` and a reward's own
``KeyboardInterrupt`` into that reward's failure and undoes a working-directory change; what it
cannot catch is a reward that ends the process itself (``os._exit``, a crash in a C extension) or
changes the trainer's global state in other ways. With this option each call goes to one spawned
worker (``multiprocessing`` spawn context: nothing is forked from the trainer); a worker that dies
or is timed out is replaced, and the call scores 0 with the reason in ``info["error"]`` (the
trainer's failing-reward warning shows it). The worker ignores SIGINT: Ctrl-C stops the trainer,
which ends the worker. Cost: one pipe round trip per completion.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from typing import Any

__all__ = ["RewardWorker", "RewardWorkerError", "isolation", "set_isolation"]

_STATE = {"process": False, "worker": None}
_LOCK = threading.Lock()


class RewardWorkerError(RuntimeError):
    """The user reward failed in its worker process (its exception text), or ended the process."""


def _serve(conn) -> None:
    """The worker's loop: ``(name, args, kwargs)`` in, ``("ok", result)`` or ``("err", text)`` out."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from grpolab.rewards import get_reward

    while True:
        try:
            name, args, kwargs = conn.recv()
        except (EOFError, OSError):
            return  # the trainer is gone
        try:
            result = ("ok", get_reward(name)(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back as text
            result = ("err", f"{type(exc).__name__}: {exc}")
        try:
            conn.send(result)
        except Exception as exc:  # noqa: BLE001 - a result that does not pickle
            conn.send(("err", f"the reward returned {type(result[1]).__name__}, which cannot be sent back ({exc})"))


class RewardWorker:
    """One spawned process that calls rewards by their registry name (started on first use)."""

    def __init__(self) -> None:
        self.proc = None
        self.conn = None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="grpolab-user-reward")
        self.proc.start()
        child.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join()
            self.conn.close()
        self.proc = self.conn = None

    def call(self, name: str, args: tuple, kwargs: dict) -> Any:
        with _LOCK:
            if self.proc is None or not self.proc.is_alive():
                self.stop()
                self._start()
            try:
                self.conn.send((name, args, kwargs))
                status, value = self.conn.recv()
            except (EOFError, OSError):
                self.proc.join(timeout=5)
                code = self.proc.exitcode
                self.stop()
                raise RewardWorkerError(f"the reward ended its worker process (exit code {code}: os._exit, a "
                                        "crash or a kill); a new worker scores the next completion") from None
            except BaseException:  # a time-out (VerifierTimeout) or a stop signal while it worked: end it
                self.stop()
                raise
        if status == "err":
            raise RewardWorkerError(value)
        return value


def set_isolation(process: bool) -> None:
    """Route the config's rewards through the worker process (``True``) or call them in this one;
    turning it off ends the worker."""
    _STATE["process"] = bool(process)
    worker = _STATE["worker"]
    if not process and worker is not None:
        worker.stop()
        _STATE["worker"] = None


def isolation() -> RewardWorker | None:
    """The worker to call through, or None (in-process)."""
    if not _STATE["process"]:
        return None
    if _STATE["worker"] is None:
        _STATE["worker"] = RewardWorker()
    return _STATE["worker"]
