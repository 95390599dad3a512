"""The benchmark toolkit: what every measurement under benchmarks/ records and how it times.

Written once here so that the scripts do not each carry a copy (they had: the machine record and
load averages in about fifteen scripts, the matmul ceiling and parameter counts in four):

- :func:`machine` -- the machine record every results JSON carries (CPU, threads, platform,
  library versions, load averages).
- :func:`load_average` -- the 1/5/15-minute load averages (other processes share the cores).
- :func:`matmul_gflops` -- the machine's float32 matmul rate, the ceiling a step's useful
  GFLOP/s are read against.
- :func:`interleaved` -- time several contenders in alternating rounds, so that a noisy machine
  affects each alike (compare side by side, as ratios).
- :func:`process_cpu_seconds` -- this process's CPU time (a clock the machine's load barely moves).
- :func:`cpu_counters`, :func:`others_cores`, :func:`wait_for_idle` -- how many cores other
  processes kept busy during a timed span (a shared machine), and waiting for a quiet one.
- :func:`param_count`, :func:`linear_param_count` -- parameters, counted once.
- :func:`results_path` -- where a benchmark writes when not told otherwise: ``runs/bench/``.
- :func:`write_json` -- the results file, written atomically.

torch is imported inside the functions that need it, so that importing this module costs nothing.

The harnesses that time grpolab's own pieces live beside it: :mod:`grpolab.bench.timing` (the
sampler against Hugging Face ``generate``) and :mod:`grpolab.bench.trl_equal_work` (TRL's
``GRPOTrainer`` and grpolab's step at equal work). Nothing in the library imports this package.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from grpolab.utils.io import atomic_write_json

__all__ = ["command_line", "cpu_counters", "interleaved", "linear_param_count", "load_average", "machine",
           "matmul_gflops", "others_cores", "param_count", "process_cpu_seconds", "results_path", "wait_for_idle",
           "write_json"]

#: the one default output folder of every benchmark (relative to the working directory, git-ignored like the
#: trainer's ``runs/default``): scratch. A result worth keeping is written to ``docs/results/`` through the
#: script's ``--out`` (``--json``, ``--md``) and gets a page there that states that command (benchmarks/README.md).
RESULTS_DIR = Path("runs") / "bench"
#: the libraries whose versions :func:`machine` records when they are installed
PACKAGES = ("grpolab", "torch", "transformers")


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, rounded to 0.01; None where the system has none."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):  # pragma: no cover - not on Linux/macOS
        return None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine(packages: Iterable[str] = PACKAGES, **extra: Any) -> dict[str, Any]:
    """The machine record of a results file.

    Keys: ``platform``, ``processor``, ``python``, ``cpu_count``, ``cpu_affinity`` (the cores this
    process may use), ``torch_threads``, ``torch_interop_threads``, ``cuda_available``, ``loadavg``
    (:func:`load_average`) and ``versions`` (each of ``packages`` installed: its version); plus
    ``extra`` as given (e.g. the run's thread setting).
    """
    import torch

    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        affinity = None
    versions = {name: v for name in packages if (v := _version(name)) is not None}
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "cpu_count": os.cpu_count(), "cpu_affinity": affinity,
            "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            "cuda_available": torch.cuda.is_available(), "loadavg": load_average(), "versions": versions, **extra}


def matmul_gflops(m: int = 1024, k: int = 1024, n: int = 1024, *, reps: int = 10, seconds: float | None = None,
                  warmup: int = 2) -> float:
    """GFLOP/s of a float32 ``[m, k] @ [k, n]`` matmul on the CPU at torch's current thread count.

    ``reps`` timed products after ``warmup`` untimed ones; with ``seconds``, as many products as
    fit in that many seconds instead. ``2 m k n`` FLOPs per product.
    """
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(warmup):
        a @ b
    done, t0 = 0, time.perf_counter()
    while (done < reps) if seconds is None else (time.perf_counter() - t0 < seconds):
        a @ b
        done += 1
    return 2 * m * k * n * done / (time.perf_counter() - t0) / 1e9


def interleaved(contenders: dict[str, Callable[[int], Any]], rounds: int, *,
                on_call: Callable[[int, str, float], None] | None = None,
                after_round: Callable[[int], None] | None = None) -> dict[str, list[float]]:
    """Seconds of each contender, ``rounds`` calls each, in alternating order.

    Round ``r`` calls ``contenders[name](r)`` for every name, in their given order rotated by ``r``
    (two contenders: AB, BA, AB, ...), so drift in the machine's load falls on each alike. A call
    that returns a number has timed itself (e.g. around a GPU synchronisation): that number is its
    seconds; otherwise the wall-clock time of the call is. ``on_call(r, name, seconds)`` runs after
    each call (a progress line), ``after_round(r)`` after each round. Returns ``{name: [seconds per
    round]}``.
    """
    names = list(contenders)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        k = r % len(names) if names else 0
        for name in names[k:] + names[:k]:
            t0 = time.perf_counter()
            got = contenders[name](r)
            dt = time.perf_counter() - t0
            if isinstance(got, (int, float)) and not isinstance(got, bool):
                dt = float(got)
            out[name].append(dt)
            if on_call is not None:
                on_call(r, name, dt)
        if after_round is not None:
            after_round(r)
    return out


def process_cpu_seconds() -> float:
    """CPU seconds of this process so far, all threads (user + system)."""
    t = os.times()
    return t.user + t.system


def cpu_counters() -> tuple[float, float, float] | None:
    """``(wall, system busy CPU-seconds, this process's CPU-seconds)`` from /proc (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz  # all but idle and iowait (guest is in user)
    except (OSError, ValueError, IndexError):
        return None
    return time.perf_counter(), busy, process_cpu_seconds()


def others_cores(a, b) -> float | None:
    """Average number of CPU cores busy with *other* processes between two :func:`cpu_counters`."""
    if a is None or b is None or b[0] <= a[0]:
        return None
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0]))


def wait_for_idle(max_wait: float, threshold: float = 0.25, window: float = 2.0) -> dict:
    """Wait (at most ``max_wait`` s) until other processes use < ``threshold`` cores over ``window`` s.
    Returns ``{"waited_s", "others_cores"}`` (the last window's :func:`others_cores`)."""
    t0 = time.perf_counter()
    last = None
    while True:
        a = cpu_counters()
        time.sleep(window)
        last = others_cores(a, cpu_counters())
        if last is None or last < threshold or time.perf_counter() - t0 >= max_wait:
            return {"waited_s": round(time.perf_counter() - t0, 1), "others_cores": last}


def param_count(model) -> int:
    """Parameters counted once (``parameters()`` already skips tied, shared tensors)."""
    return sum(p.numel() for p in model.parameters())


def linear_param_count(model) -> int:
    """Weights that multiply activations: every ``nn.Linear`` (attention and MLP projections, the
    LM head; a head tied to the embedding counts here too, as the matmul it is)."""
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def results_path(name: str) -> Path:
    """``runs/bench/<name>`` (:data:`RESULTS_DIR`): a benchmark's default output file or folder."""
    return RESULTS_DIR / name


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON atomically (:func:`grpolab.utils.io.atomic_write_json`: temp
    file + rename, the folder created); returns the path."""
    atomic_write_json(path, data)
    return Path(path)


def command_line() -> str:
    """The command that ran this script, as a results file records it."""
    return "python " + " ".join(sys.argv)
