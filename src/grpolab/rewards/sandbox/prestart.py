"""Prestarted sandboxes: start the next fresh sandbox while the current program runs.

Starting a sandbox (bubblewrap's namespaces, then ``python -I -S`` up to the point where it
waits for its request) costs about 10 ms of CPU and some waiting in the kernel; a pool that
starts each sandbox only when a program arrives leaves the cores idle during that wait. So each
slot of a :class:`~grpolab.rewards.sandbox.pool.SandboxPool` keeps one sandbox (or, for the judge
path, a solver with its two fresh pipes to the judge) started ahead of time by a background thread.

What this does not change: a prestarted sandbox has never read a request (it blocks on its
first read of fd 3), it serves exactly one program and is then gone; nothing of one program is
reachable from the next. The sandbox's shape depends only on the slot's uid and the /tmp size
(``limits.tmp_mb()``); a run whose limits need another /tmp size discards it and starts a fresh
one. Unused sandboxes are killed when the pool closes (and, as always, when this process dies:
``--die-with-parent`` ties them to the prestarting thread, which lives as long as the pool).
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Callable

from grpolab.rewards.sandbox.runner import Proc, discard

__all__ = ["Prestarter", "idle_pids"]

_LIVE: "weakref.WeakSet[Prestarter]" = weakref.WeakSet()


def idle_pids() -> list[int]:
    """bubblewrap pids of every live pool's prestarted, never-used sandboxes in this process
    (audits for leftover processes leave them out)."""
    return [pid for p in list(_LIVE) for pid in p.idle_pids()]

#: (kind, /tmp size in MB): kind "one" is a single sandbox, "solver" one with a channel to the judge.
Key = tuple[str, int]


class Prestarter:
    """One ready, never-used sandbox per slot, refilled in the background.

    ``start(slot, key) -> list[Proc]`` starts what ``key`` names for ``slot`` (called on the
    prestarting thread only).
    """

    def __init__(self, start: Callable[[int, Key], list[Proc]], depth: int = 1) -> None:
        self._start = start
        self.depth = depth
        self._ready: dict[int, list[tuple[Key, list[Proc]]]] = {}
        self._lock = threading.Lock()
        self._todo: queue.Queue = queue.Queue()
        self._closed = False
        self.owner_pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="grpolab-sandbox-prestart",
                                        daemon=True)
        self._thread.start()
        _LIVE.add(self)

    def take(self, slot: int, key: Key) -> list[Proc] | None:
        """The slot's ready sandboxes when they match ``key`` and are alive, else None; either
        way a fresh one for ``key`` is started in the background for the slot's next run."""
        if os.getpid() != self.owner_pid:  # a forked child: its parent's sandboxes are not its own
            return None
        with self._lock:
            queue_ = self._ready.get(slot, [])
            entry = queue_.pop(0) if queue_ else None
            if not self._closed:
                self._todo.put((slot, key))
        if entry is None:
            return None
        ready_key, procs = entry
        if ready_key != key or any(p.popen.poll() is not None for p in procs):
            discard(procs)
            return None
        return procs

    def fill(self, slot: int, key: Key) -> None:
        """Start one for ``slot`` in the background (e.g. when the pool warms up)."""
        with self._lock:
            if not self._closed and os.getpid() == self.owner_pid:
                self._todo.put((slot, key))

    def call(self, fn: Callable[[], object]):
        """``fn()`` run on the prestarting thread, which lives as long as the pool: what it
        starts is tied (``--die-with-parent``) to that thread, not to a caller's thread that may
        end first (a thread pool's worker, say). Runs here when there is no such thread."""
        done, box = threading.Event(), {}
        with self._lock:
            if self._closed or os.getpid() != self.owner_pid:
                return fn()
            self._todo.put(("call", fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def idle_pids(self) -> list[int]:
        """bubblewrap pids of the ready, never-used sandboxes (audits leave them out)."""
        with self._lock:
            return [p.popen.pid for q in self._ready.values() for _, procs in q for p in procs]

    def close(self) -> None:
        """Stop prestarting and discard every unused sandbox (owner process only)."""
        if os.getpid() != self.owner_pid:
            return
        with self._lock:
            self._closed = True
            ready, self._ready = [e for q in self._ready.values() for e in q], {}
        self._todo.put(None)
        self._thread.join(timeout=10)
        while not self._todo.empty():  # calls that came after the last one ran: refused
            item = self._todo.get_nowait()
            if item is not None and item[0] == "call":
                item[2]["error"] = RuntimeError("the sandbox pool closed")
                item[3].set()
        for _, procs in ready:
            discard(procs)

    def _loop(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                return
            if item[0] == "call":
                _, fn, box, done = item
                try:
                    box["value"] = fn()
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    box["error"] = exc
                done.set()
                continue
            slot, key = item
            try:
                procs = self._start(slot, key)
            except Exception:  # noqa: BLE001 - the run itself then starts one and reports
                continue
            old = []
            with self._lock:
                if not self._closed:
                    q = self._ready.setdefault(slot, [])
                    q.append((key, procs))
                    # at most ``depth`` per slot, those of the newest key first in line
                    old = [e for e in q if e[0] != key] + [e for e in q if e[0] == key][self.depth:]
                    q[:] = [e for e in q if e[0] == key][:self.depth]
            if self._closed:
                discard(procs)
            for _, stale in old:
                discard(stale)
