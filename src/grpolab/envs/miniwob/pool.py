"""A pool of long-lived headless browsers running MiniWoB++ episodes, isolated from the network.

:class:`MiniWoBPool` holds ``browsers`` worker processes (:mod:`grpolab.envs.miniwob._worker`),
each one Selenium + chromedriver + Chromium on the ``miniwob`` package's own task pages
(``file://``, no server). Work arrives as *jobs*: "reset task T to seed S, replay these actions,
(optionally) let the scripted expert finish"; :meth:`MiniWoBPool.run` spreads a list of jobs over
the browsers (one job at a time per browser, all browsers at once) and returns the results in
order. A browser keeps the last task's page loaded, so jobs of one task in a row cost a reset
(tens of ms), not a page load.

Network isolation (``netns``): with "auto" (default) or "require" every worker starts inside a
new network namespace that has only the loopback interface (``unshare --net``, as root or in an
unprivileged user namespace where the kernel allows it) and a new PID namespace (so the
worker's exit kills every browser process). "require" raises :class:`BrowserUnavailable` when
namespaces are not allowed; "auto" then runs without one and relies on Chromium's offline flags
(:data:`grpolab.envs.miniwob._worker.OFFLINE_FLAGS`); ``pool.isolated`` says which happened.

Lifetime: browsers are closed by :meth:`MiniWoBPool.close`, the context manager, an ``atexit``
hook, and, if this process dies, by the workers themselves (end of stdin -> quit). A browser is
replaced after ``recycle_every`` episodes (its memory grows ~40 MiB per 1,000) and whenever it
dies or stops answering (the job is retried once on the fresh browser).

Finding the browser: ``MINIWOB_CHROME_BINARY`` / ``MINIWOB_CHROMEDRIVER`` when set, otherwise
Debian's ``/usr/lib/chromium/chromium`` (or ``chromium`` on PATH) and ``chromedriver``.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

__all__ = [
    "BrowserUnavailable",
    "MiniWoBError",
    "MiniWoBPool",
    "browser_status",
    "find_browser",
    "namespace_prefix",
    "shared_pool",
]

NETNS_MODES = ("auto", "require", "off")


class BrowserUnavailable(RuntimeError):
    """The browser, its driver, the ``miniwob`` package or the network namespace is missing."""


class MiniWoBError(RuntimeError):
    """A browser failed a job twice (the message has the browser's error)."""


def _miniwob_html() -> Path:
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise BrowserUnavailable("the 'miniwob' package is not installed: pip install 'grpolab[miniwob]'")
    html = Path(list(spec.submodule_search_locations)[0]) / "html" / "miniwob"
    if not html.is_dir():
        raise BrowserUnavailable(f"the 'miniwob' package has no task pages at {html}; reinstall it (miniwob==1.1.0)")
    return html


def find_browser() -> tuple[str, str]:
    """``(chromium, chromedriver)`` paths.

    Raises:
        BrowserUnavailable: naming what is missing and how to install it.
    """
    chrome = os.environ.get("MINIWOB_CHROME_BINARY")
    driver = os.environ.get("MINIWOB_CHROMEDRIVER")
    if bool(chrome) != bool(driver):
        raise BrowserUnavailable("set MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER together (or neither)")
    if not chrome:
        real = Path("/usr/lib/chromium/chromium")  # Debian: /usr/bin/chromium is a shell wrapper
        chrome = str(real) if real.exists() else (shutil.which("chromium") or shutil.which("chromium-browser")
                                                  or shutil.which("google-chrome") or "")
        driver = shutil.which("chromedriver") or ""
    missing = [name for name, path in (("chromium", chrome), ("chromedriver", driver))
               if not path or not os.access(path, os.X_OK)]
    if missing:
        raise BrowserUnavailable(
            f"{' and '.join(missing)} not found: install them (Debian/Ubuntu: apt-get install -y chromium "
            "chromium-driver) or point MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER at them")
    return chrome, driver


def browser_status() -> str | None:
    """``None`` when a browser can run MiniWoB++ here, else the reason it cannot."""
    try:
        find_browser()
        _miniwob_html()
        import selenium  # noqa: F401
    except BrowserUnavailable as e:
        return str(e)
    except ImportError:
        return "the 'selenium' package is not installed: pip install 'grpolab[miniwob]'"
    return None


_PREFIX: dict[str, list[str] | None] = {}


def namespace_prefix() -> list[str] | None:
    """The ``unshare`` command that runs a process in its own network + PID namespace, or None.

    Tried once per process: as root ``unshare --net --pid --fork --kill-child``, otherwise the
    same inside an unprivileged user namespace (``--user --map-root-user``).
    """
    if "p" in _PREFIX:
        return _PREFIX["p"]
    unshare = shutil.which("unshare")
    found = None
    if unshare:
        base = [unshare, "--net", "--pid", "--fork", "--kill-child"]
        for prefix in (base, [unshare, "--user", "--map-root-user", *base[1:]]):
            try:
                ok = subprocess.run(prefix + ["true"], capture_output=True, timeout=10).returncode == 0
            except (OSError, subprocess.TimeoutExpired):
                ok = False
            if ok:
                found = prefix + ["--"]
                break
    _PREFIX["p"] = found
    return found


class _WorkerDied(RuntimeError):
    pass


class BrowserWorker:
    """One worker process (one browser); see :mod:`grpolab.envs.miniwob._worker`."""

    def __init__(self, *, netns: str = "auto", start_timeout: float = 60.0, wrap: list[str] | None = None) -> None:
        chrome, driver = find_browser()
        html = _miniwob_html()
        prefix = namespace_prefix() if netns != "off" else None
        if netns == "require" and prefix is None:
            raise BrowserUnavailable(
                "env.options.netns=require but this process may not create a network namespace "
                "(needs root or unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1); "
                "use netns=auto to run with Chromium's offline flags only")
        self.isolated = prefix is not None
        if netns == "auto" and not self.isolated:
            warnings.warn("no network namespace allowed here (needs root or unprivileged user namespaces): the "
                          "MiniWoB++ browsers run with Chromium's offline flags only", RuntimeWarning, stacklevel=2)
        self._tmp = tempfile.TemporaryDirectory(prefix="grpolab-miniwob-")
        self.log_path = Path(self._tmp.name) / "worker.log"
        r, w = os.pipe()
        env = dict(os.environ)
        env.update({
            "GRPOLAB_MINIWOB_REPLY_FD": str(w), "GRPOLAB_MINIWOB_NETNS": "1" if self.isolated else "0",
            "GRPOLAB_MINIWOB_CHROME": chrome, "GRPOLAB_MINIWOB_DRIVER": driver, "GRPOLAB_MINIWOB_HTML": str(html),
            "GRPOLAB_MINIWOB_PROFILE": str(Path(self._tmp.name) / "profile"),
            "SE_AVOID_STATS": "true", "SE_OFFLINE": "true", "PYTHONUNBUFFERED": "1",
        })
        src = str(Path(__file__).resolve().parents[3])  # the grpolab source root, for the child's imports
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # ``wrap`` (e.g. strace, for the no-traffic test) runs inside the namespaces, around the worker
        cmd = (prefix or []) + list(wrap or []) + [sys.executable, "-m", "grpolab.envs.miniwob._worker"]
        self._log = open(self.log_path, "wb")
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=self._log, stderr=self._log,
                                         pass_fds=(w,), env=env, start_new_session=True)
        finally:
            os.close(w)
        self._rfd = r
        self._buf = b""
        self.episodes = 0
        self.task: str | None = None  # the task whose page is loaded
        try:
            hello = self._read(start_timeout)
        except _WorkerDied as e:
            self.close()
            raise BrowserUnavailable(f"the browser did not start: {e}") from None
        if not hello.get("ok"):
            self.close()
            raise BrowserUnavailable(f"the browser did not start: {hello.get('error')}; log: {self._log_tail()}")
        self.interfaces = hello["interfaces"]

    def _log_tail(self, n: int = 800) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _WorkerDied(f"no answer in {timeout:.0f} s; log: {self._log_tail()}")
            ready, _, _ = select.select([self._rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._rfd, 1 << 20)
            if not chunk:
                raise _WorkerDied(f"the browser process exited (code {self.proc.poll()}); log: {self._log_tail()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def request(self, req: dict, timeout: float = 60.0) -> dict:
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise _WorkerDied(f"the browser process is gone ({e}); log: {self._log_tail()}") from None
        res = self._read(timeout)
        if req.get("cmd") == "play":
            self.episodes += 1
        return res

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 10.0) -> None:
        """Quit the browser; kill the worker's process group if it does not exit in time."""
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "quit"}\n')
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait(5)
        if getattr(self, "_rfd", None) is not None:
            os.close(self._rfd)
            self._rfd = None
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        self._tmp.cleanup()


class MiniWoBPool:
    """Long-lived browsers for MiniWoB++ jobs (see the module docstring).

    Args:
        browsers: worker processes (one Chromium each); 2 saturate 2 cores.
        netns: "auto", "require" or "off" (see the module docstring).
        recycle_every: replace a browser after this many episodes (0: never).
        job_timeout: seconds a job may take before its browser is declared dead.
        wrap: a command prefix run inside the namespaces around each worker (diagnostics: the
            no-traffic test runs the browsers under ``strace``).
    """

    def __init__(self, browsers: int = 2, *, netns: str = "auto", recycle_every: int = 2000,
                 job_timeout: float = 60.0, wrap: list[str] | None = None) -> None:
        if isinstance(browsers, bool) or not isinstance(browsers, int) or browsers < 1:
            raise ValueError(f"browsers must be an int >= 1, got {browsers!r}")
        if netns not in NETNS_MODES:
            raise ValueError(f"netns must be one of {NETNS_MODES}, got {netns!r}")
        if isinstance(recycle_every, bool) or not isinstance(recycle_every, int) or recycle_every < 0:
            raise ValueError(f"recycle_every must be an int >= 0 (0 = never), got {recycle_every!r}")
        self.n_browsers, self.netns, self.recycle_every, self.job_timeout = browsers, netns, recycle_every, job_timeout
        self.wrap = list(wrap or [])
        self._idle: queue.Queue[BrowserWorker] = queue.Queue()
        self._all: list[BrowserWorker] = []
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.restarts = 0
        self.recycled = 0
        self.episodes = 0
        self.closed = False
        atexit.register(self.close)

    # -------------------------------------------------------------------------- lifecycle
    def start(self) -> "MiniWoBPool":
        """Start the browsers (in parallel); called on first use."""
        if self.closed:
            raise RuntimeError("this MiniWoBPool is closed; make a new one")
        with self._lock:
            if self._executor is not None:
                return self
            with ThreadPoolExecutor(self.n_browsers) as ex:
                futures = [ex.submit(BrowserWorker, netns=self.netns, wrap=self.wrap) for _ in range(self.n_browsers)]
                errors = []
                for f in futures:
                    try:
                        w = f.result()
                        self._all.append(w)
                        self._idle.put(w)
                    except Exception as e:  # noqa: BLE001 - close the ones that started, then raise
                        errors.append(e)
            if errors:
                for w in self._all:
                    w.close()
                self._all.clear()
                raise errors[0]
            self._executor = ThreadPoolExecutor(self.n_browsers, thread_name_prefix="miniwob")
        return self

    @property
    def isolated(self) -> bool:
        """Every browser runs in a loopback-only network namespace."""
        self.start()
        return all(w.isolated for w in self._all)

    @property
    def pids(self) -> list[int]:
        """Process ids of the worker launchers (for tests: all must be gone after close)."""
        return [w.proc.pid for w in self._all]

    def close(self) -> None:
        """Close every browser (idempotent)."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._executor is not None:
                self._executor.shutdown(wait=True)
            for w in self._all:
                w.close()
            self._all.clear()
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> "MiniWoBPool":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -------------------------------------------------------------------------- work
    def _replace(self, w: BrowserWorker) -> BrowserWorker:
        w.close()
        fresh = BrowserWorker(netns=self.netns, wrap=self.wrap)
        with self._lock:
            self._all = [fresh if x is w else x for x in self._all]
        return fresh

    def _run_on(self, w: BrowserWorker, req: dict) -> tuple[dict, BrowserWorker]:
        """Run ``req`` on ``w`` (retried once on a fresh browser); returns the result and the browser."""
        for attempt in (0, 1):
            try:
                res = w.request(req, timeout=self.job_timeout)
                if res.get("ok"):
                    break
                error = res.get("error")
            except _WorkerDied as e:
                error = str(e)
            if attempt == 1:
                raise MiniWoBError(f"MiniWoB++ job {req.get('task')!r} seed {req.get('seed')} failed twice: {error}")
            self.restarts += 1
            w = self._replace(w)
        if req.get("cmd") == "play":
            w.task = req["task"]
            with self._lock:
                self.episodes += 1
        if self.recycle_every and w.episodes >= self.recycle_every:
            self.recycled += 1
            w = self._replace(w)
        return res, w

    def run(self, jobs: list[dict]) -> list[dict]:
        """Run ``jobs`` (``play`` requests) over all browsers; results in the order of ``jobs``.

        A play job: ``{"task", "seed", "actions": [[kind, id, text], ...], "expert": bool,
        "max_steps": int, "elements": "visible" | "interactive"}``. Each browser takes the next
        job of the task whose page it has loaded, else of the task with the most jobs left, so
        a mixed batch costs few page loads.
        """
        self.start()
        reqs = [{"cmd": "play", **j} if "cmd" not in j else j for j in jobs]
        groups: dict[str, deque[int]] = {}
        for i, r in enumerate(reqs):
            groups.setdefault(r.get("task", ""), deque()).append(i)
        results: list[dict | None] = [None] * len(reqs)
        errors: list[BaseException] = []
        lock = threading.Lock()

        def take(task: str | None) -> int | None:
            with lock:
                if errors or not groups:
                    return None
                key = task if task in groups else max(groups, key=lambda t: len(groups[t]))
                i = groups[key].popleft()
                if not groups[key]:
                    del groups[key]
                return i

        def drain() -> None:
            w = self._idle.get()
            try:
                while (i := take(w.task)) is not None:
                    results[i], w = self._run_on(w, reqs[i])
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                with lock:
                    errors.append(e)
            finally:
                self._idle.put(w)

        n_threads = min(self.n_browsers, len(reqs))
        if n_threads <= 1:
            drain()
        else:
            for f in [self._executor.submit(drain) for _ in range(n_threads)]:
                f.result()
        if errors:
            raise errors[0]
        return results  # type: ignore[return-value]

    def each_browser(self, req: dict) -> list[dict]:
        """Send ``req`` to every browser once (e.g. ``{"cmd": "net_probe"}``)."""
        self.start()
        taken = [self._idle.get() for _ in range(self.n_browsers)]
        try:
            return [w.request(req, timeout=self.job_timeout) for w in taken]
        finally:
            for w in taken:
                self._idle.put(w)


_SHARED: dict[tuple, MiniWoBPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(browsers: int = 2, *, netns: str = "auto", recycle_every: int = 2000) -> MiniWoBPool:
    """The process-wide pool for these settings (started lazily; closed at exit)."""
    key = (browsers, netns, recycle_every)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None or pool.closed:
            pool = _SHARED[key] = MiniWoBPool(browsers, netns=netns, recycle_every=recycle_every)
        return pool
