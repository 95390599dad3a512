"""Score a batch of completions in parallel: :func:`score_batch`.

``score_batch(requests)`` takes a list whose entries are any of

* ``(name, completion, reference)`` or ``(name, completion, reference, options)``;
* ``(item, completion)`` for an object with ``reward``, ``reference`` and ``reward_options``
  attributes (a :class:`grpolab.tasks.TaskItem`);
* a :class:`ScoreRequest`;

and returns one :class:`~grpolab.rewards.RewardResult` per entry, in order. It never raises for
a bad entry or a failing verifier: each such entry gets score 0 with ``info["error"]`` (like
:func:`~grpolab.rewards.safe_score`).

Where each entry runs:

* sandboxed verifiers (``code``) -> a thread pool of ``len(pool servers)`` threads: the work is
  in the fork-server children, the threads only wait;
* the other built-in verifiers (``math``, ``exact``, ``sql``, ``json_schema``,
  ``reasoning_gym``) -> a pool of ``workers`` verifier processes (default: the CPUs this process
  may use; ``python -m grpolab.rewards._worker``, started on first use and reused, so nothing is
  forked from the trainer and no ``__main__`` guard is needed), when the batch is big enough to
  pay for the IPC (``min_parallel``); each worker applies ``safe_score``'s time limit in its
  main thread, and a worker that dies or hangs is replaced (that entry scores 0 with an error);
* rewards registered at runtime (not importable by a worker) -> in this process, in order.

``parallel=False`` runs everything in this process (the reference behaviour; tests compare).
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Sequence

from grpolab.rewards.base import RewardResult, safe_score

__all__ = [
    "PROCESS_REWARDS",
    "SANDBOX_REWARDS",
    "ScoreRequest",
    "score_batch",
    "shutdown_executors",
]

#: Rewards whose work happens in sandbox subprocesses: run from threads.
SANDBOX_REWARDS = frozenset({"code"})
#: Built-in rewards a worker process can run (registered on ``import grpolab.rewards``).
PROCESS_REWARDS = frozenset({"math", "exact", "sql", "json_schema", "reasoning_gym"})


@dataclass
class ScoreRequest:
    """One thing to score: ``safe_score(name, completion, reference, **options)``."""

    name: str
    completion: str
    reference: Any
    options: dict[str, Any] = field(default_factory=dict)


def _as_request(entry: Any) -> ScoreRequest:
    if isinstance(entry, ScoreRequest):
        return entry
    if isinstance(entry, (tuple, list)):
        if len(entry) == 2 and hasattr(entry[0], "reward") and hasattr(entry[0], "reference"):
            item, completion = entry
            return ScoreRequest(item.reward, completion, item.reference,
                                dict(getattr(item, "reward_options", {}) or {}))
        if len(entry) in (3, 4) and isinstance(entry[0], str):
            options = entry[3] if len(entry) == 4 else {}
            if options is None:
                options = {}
            if not isinstance(options, dict):
                raise TypeError(f"options must be a dict, got {type(options).__name__}")
            return ScoreRequest(entry[0], entry[1], entry[2], dict(options))
    raise TypeError(
        "score_batch entries must be (name, completion, reference[, options]), "
        f"(TaskItem, completion) or ScoreRequest; got {type(entry).__name__} {entry!r:.80}"
    )


class _Worker:
    """One ``python -m grpolab.rewards._worker`` process; used by one thread at a time."""

    def __init__(self) -> None:
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the folder holding grpolab/
        env["PYTHONPATH"] = os.pathsep.join([src] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grpolab.rewards._worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True,
            start_new_session=True,
        )
        self.owner_pid = os.getpid()

    def score(self, r: ScoreRequest, timeout_s: float) -> RewardResult:
        data = pickle.dumps((r.name, r.completion, r.reference, r.options))
        self.proc.stdin.write(struct.pack(">Q", len(data)) + data)
        self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s

        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise TimeoutError(f"verifier worker gave no answer within {timeout_s:.0f} s")
                chunk = os.read(fd, n - len(buf))
                if not chunk:
                    raise EOFError("verifier worker died")
                buf += chunk
            return buf

        (n,) = struct.unpack(">Q", read(8))
        value, info = pickle.loads(read(n))
        return RewardResult(value, info)

    def close(self) -> None:
        if os.getpid() != self.owner_pid:
            return
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class _WorkerPool:
    """``n`` worker processes, started lazily, handed to threads one at a time."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.owner_pid = os.getpid()
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        for _ in range(n):
            self._idle.put(None)
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        self.threads = ThreadPoolExecutor(max_workers=n, thread_name_prefix="grpolab-verify-proc")

    def _run(self, r: ScoreRequest) -> RewardResult:
        from grpolab.rewards import base

        worker = self._idle.get()
        try:
            if worker is None or worker.proc.poll() is not None:
                worker = _Worker()
                with self._lock:
                    self._all.append(worker)
            limit = (base.VERIFIER_TIME_LIMIT_S or 60.0) + 30.0
            return worker.score(r, limit)
        except Exception as exc:  # noqa: BLE001 - the worker is suspect: replace it
            if worker is not None:
                worker.proc.kill()
                worker.close()
            worker = None
            return RewardResult(0.0, {"error": f"{type(exc).__name__}: {exc}", "reward": r.name})
        finally:
            self._idle.put(worker)

    def submit(self, r: ScoreRequest) -> Future:
        return self.threads.submit(self._run, r)

    def close(self) -> None:
        self.threads.shutdown(wait=True, cancel_futures=True)
        if os.getpid() != self.owner_pid:
            return
        with self._lock:
            workers, self._all = self._all, []
        for w in workers:
            w.close()


_LOCK = threading.Lock()
_PROCS: _WorkerPool | None = None
_PROCS_KEY: tuple[int, int] | None = None
_THREADS: ThreadPoolExecutor | None = None
_THREADS_KEY: tuple[int, int] | None = None


def _default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _process_pool(workers: int) -> _WorkerPool:
    global _PROCS, _PROCS_KEY
    with _LOCK:
        key = (os.getpid(), workers)
        if _PROCS is None or _PROCS_KEY != key:
            if _PROCS is not None and _PROCS.owner_pid == os.getpid():
                _PROCS.close()
            _PROCS = _WorkerPool(workers)
            _PROCS_KEY = key
        return _PROCS


def _thread_pool(n: int) -> ThreadPoolExecutor:
    global _THREADS, _THREADS_KEY
    with _LOCK:
        key = (os.getpid(), n)
        if _THREADS is None or _THREADS_KEY != key:
            _THREADS = ThreadPoolExecutor(max_workers=n, thread_name_prefix="grpolab-verify")
            _THREADS_KEY = key
        return _THREADS


def shutdown_executors() -> None:
    """Stop the worker processes and threads (also runs at interpreter exit)."""
    global _PROCS, _THREADS
    with _LOCK:
        procs, threads = _PROCS, _THREADS
        _PROCS = _THREADS = None
    if threads is not None:
        threads.shutdown(wait=True, cancel_futures=True)
    if procs is not None:
        procs.close()


atexit.register(shutdown_executors)


def score_batch(
    requests: Sequence[Any],
    *,
    workers: int | None = None,
    parallel: bool = True,
    min_parallel: int = 16,
) -> list[RewardResult]:
    """Score every entry (see module doc); results in input order; never raises per entry.

    Args:
        requests: entries as described in the module docstring.
        workers: size of the process pool (default: usable CPUs); 1 disables it.
        parallel: False scores everything sequentially in this process.
        min_parallel: fewer process-pool entries than this run in this process instead.
    """
    results: list[RewardResult | None] = [None] * len(requests)
    reqs: list[ScoreRequest | None] = []
    for i, entry in enumerate(requests):
        try:
            reqs.append(_as_request(entry))
        except TypeError as exc:
            reqs.append(None)
            results[i] = RewardResult(0.0, {"error": f"TypeError: {exc}", "reward": "?"})
    workers = _default_workers() if workers is None else max(1, int(workers))

    sandboxed = [i for i, r in enumerate(reqs) if r is not None and r.name in SANDBOX_REWARDS]
    in_procs = [i for i, r in enumerate(reqs) if r is not None and r.name in PROCESS_REWARDS]
    if not parallel or workers == 1 or len(in_procs) < min_parallel:
        in_procs = []
    if not parallel:
        sandboxed = []
    remote = set(sandboxed) | set(in_procs)
    futures: dict[int, Future] = {}
    if sandboxed:
        from grpolab.rewards.sandbox import default_pool

        pool = _thread_pool(max(1, default_pool().size))
        for i in sandboxed:
            r = reqs[i]
            futures[i] = pool.submit(safe_score, r.name, r.completion, r.reference, **r.options)
    if in_procs:
        procs = _process_pool(workers)
        for i in in_procs:
            r = reqs[i]
            futures[i] = procs.submit(r)
    for i, r in enumerate(reqs):
        if r is not None and i not in remote:
            results[i] = safe_score(r.name, r.completion, r.reference, **r.options)
    for i, fut in futures.items():
        try:
            results[i] = fut.result()
        except Exception as exc:  # noqa: BLE001 - a dead worker must not kill the batch
            results[i] = RewardResult(
                0.0, {"error": f"{type(exc).__name__}: {exc}", "reward": reqs[i].name}
            )
    return results  # type: ignore[return-value]
