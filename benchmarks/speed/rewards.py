"""Verifier throughput: math verification and sandboxed code verification, items per second.

Rows:
  * math / plain numbers: ``safe_score("math", "#<n>", "<n>")`` in this process;
  * math / LaTeX via math-verify: ``\\boxed{\\frac{a}{b}}`` against ``\\frac{2a}{2b}``, in this
    process, and through ``score_batch`` (verifier worker processes, one per CPU);
  * sandbox / run_sandboxed: a trivial program (``print(6 * 7)``) through the sandbox pool
    (``--threads`` callers, default one per pool slot): a fresh bubblewrap sandbox per program;
  * code verifier, fast path: ``score("code", "def f(x): return x + 1", ["assert f(1) == 2"])``
    through ``score_batch`` (one sandbox per item);
  * code verifier, judge path: the same check as ``r = f(1); assert r == 2`` (a solver sandbox
    and a judge sandbox per item).

Each number is the median over ``--rounds`` rounds. The machine is shared: read ratios rather
than absolute numbers when the load average is high (it is printed and saved). Load-free
figures: the CPU seconds one item costs (this process + every process it reaped: the sandboxes,
whose programs run as PID 1 of their namespace and are reaped through bubblewrap; for the old
fork server, its servers' CPU from /proc), turned into items/s for 2 otherwise idle cores; and
the machine's busy time per item (/proc/stat: counts the kernel's namespace teardown too, and
everything else running on the machine, so an upper bound on a shared machine).

Run:  python benchmarks/speed/rewards.py [--rounds 3] [--n-code 400] [--out PATH]
Writes runs/bench/rewards.json (atomically; ``--out``).

Before/after:  python benchmarks/speed/rewards.py --before /path/to/old/src [--rounds 3]
                [--user 4242 --python /usr/bin/python3]   (as root: the unprivileged mode)
measures the sandbox rows (trivial program, fast path, judge path) for the grpolab under
``--before`` and for this one, each round in a fresh subprocess per side, sides alternating, and
prints the medians and after/before ratios; writes runs/bench/sandbox_throughput.json (``--out``;
the committed record: ``--out docs/results/sandbox_throughput.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grpolab.rewards import run_sandboxed, safe_score, score_batch
from grpolab.rewards.math import math_verify_available
from grpolab.rewards.sandbox import default_pool
from grpolab.utils.io import atomic_write_json

PROGRAM = "print(6 * 7)"
CODE = "def f(x):\n    return x + 1\n"
TESTS = ["assert f(1) == 2"]
#: The same check in a shape the code verifier's fast path does not take (the judge process).
JUDGE_TESTS = ["r = f(1)\nassert r == 2"]


def rate(n: int, fn) -> float:
    t0 = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t0)


def sandbox_many(n: int, threads: int, mode: str) -> None:
    def one(_):
        r = run_sandboxed(PROGRAM, mode=mode, timeout_s=10.0)
        assert r.stdout == "42\n", r
    with ThreadPoolExecutor(threads) as ex:
        list(ex.map(one, range(n)))


def code_batch(n: int, tests: list[str] = TESTS) -> None:
    out = score_batch([("code", CODE, tests)] * n)
    assert all(r.score == 1.0 for r in out), [r.info for r in out if r.score != 1.0][:2]


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat: user+nice+system+irq+softirq)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def server_pids(pool) -> list[int]:
    """The old fork server's server processes (none in the bubblewrap sandbox)."""
    return [srv.proc.pid for srv in getattr(pool, "_all", [])]


def cpu_seconds(server_pids: list[int]) -> float:
    """CPU time so far of this process, everything it reaped, the old sandbox servers and
    everything they reaped."""
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in server_pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        except OSError:
            pass
    return total


def _measured(n: int, pool, fn) -> tuple[float, float, float]:
    """(items/s, CPU ms per item, machine-busy ms per item) of ``fn`` over ``n`` items."""
    c0, b0 = cpu_seconds(server_pids(pool)), machine_busy_s()
    r = rate(n, fn)
    c1, b1 = cpu_seconds(server_pids(pool)), machine_busy_s()
    return r, (c1 - c0) / n * 1000, (b1 - b0) / n * 1000


def worker(n: int, user: int | None = None, python: str | None = None) -> dict:
    """One round of the sandbox rows in this process (for ``--before``); ``user``/``python``:
    as root, a pool of 2 whose programs run as that ordinary uid under that interpreter (the
    unprivileged mode, ``SandboxPool(python=..., user=...)``)."""
    if user is not None:
        from grpolab.rewards import sandbox as sandbox_mod

        sandbox_mod._POOL = sandbox_mod.SandboxPool(size=2, python=python, user=user)
    pool = default_pool()
    pool.warm_up()
    size = pool.size
    sandbox_many(20, size, "auto")  # warm
    code_batch(20)
    out = {}
    for key, fn in (("trivial", lambda: sandbox_many(n, size, "auto")),
                    ("code", lambda: code_batch(n)),
                    ("code_judge", lambda: code_batch(n, JUDGE_TESTS))):
        r, cpu, busy = _measured(n, pool, fn)
        out.update({f"{key}_per_s": r, f"{key}_cpu_ms": cpu, f"{key}_busy_ms": busy})
    out["isolation"] = list(pool.features())
    out["pool_size"] = size
    return out


def _out(args, name: str) -> Path:
    """``--out``, else the toolkit's default ``runs/bench/<name>`` (imported here, as in :func:`_machine`)."""
    if args.out:
        return Path(args.out)
    from grpolab import bench

    return bench.results_path(name)


def _machine(load_before, load_after) -> dict:
    """The toolkit's machine record (:func:`grpolab.bench.machine`), with the load averages
    around the measurement. Imported here, after the measurement: a ``--worker`` may run an older
    grpolab (``--before``) that has no toolkit, and torch stays out of the timed process."""
    from grpolab import bench

    return bench.machine(load_average_before=load_before, load_average_after=load_after)


def before_after(args) -> None:
    import json
    import subprocess
    import sys

    here = str(Path(__file__).resolve().parents[2] / "src")
    sides = {"before": str(Path(args.before).resolve()), "after": here}
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, src in sides.items():
            env = dict(os.environ, PYTHONPATH=src)
            cmd = [sys.executable, __file__, "--worker", "--n-code", str(args.n_code)]
            if args.user is not None:
                cmd += ["--user", str(args.user), "--python", args.python or "/usr/bin/python3"]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    load_after = os.getloadavg()
    keys = ("trivial_per_s", "code_per_s", "code_judge_per_s", "trivial_cpu_ms", "code_cpu_ms",
            "code_judge_cpu_ms", "trivial_busy_ms", "code_busy_ms", "code_judge_busy_ms")
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in runs.items()}
    print(f"{str(args.n_code) + ' items/round, pool of ' + str(runs['after'][0]['pool_size']):<44}  "
          f"{'before':>9}  {'after':>9}  after/before")
    labels = {"trivial_per_s": "run_sandboxed trivial program (items/s)",
              "code_per_s": "code verifier, fast path (items/s)",
              "code_judge_per_s": "code verifier, judge path (items/s)",
              "trivial_cpu_ms": "CPU per trivial program (ms)",
              "code_cpu_ms": "CPU per fast-path item (ms)",
              "code_judge_cpu_ms": "CPU per judge-path item (ms)",
              "trivial_busy_ms": "machine busy per trivial program (ms)",
              "code_busy_ms": "machine busy per fast-path item (ms)",
              "code_judge_busy_ms": "machine busy per judge-path item (ms)"}
    for k in keys:
        b, a = med["before"][k], med["after"][k]
        print(f"{labels[k]:<44}  {b:9.2f}  {a:9.2f}  x{a / b:.3f}")
    for n in sides:
        print(f"{n}: {sides[n]} isolation={runs[n][0]['isolation']}")
    print(f"rounds={args.rounds} cpus={os.cpu_count()} load average before={load_before[0]:.1f} "
          f"after={load_after[0]:.1f}")
    idle = {n: {k.replace("_cpu_ms", "_per_s_on_2_idle_cores_from_cpu"): 2000 / med[n][k]
                for k in keys if k.endswith("_cpu_ms")} for n in sides}
    for k in idle["after"]:
        print(f"{k}: before {idle['before'][k]:.0f}, after {idle['after'][k]:.0f}")
    path = _out(args, "sandbox_throughput.json")
    atomic_write_json(path, {"median": med, "from_cpu": idle, "rounds": runs, "sides": sides,
                             "config": {"rounds": args.rounds, "n_code": args.n_code},
                             "machine": _machine(load_before, load_after)})
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-code", type=int, default=400, help="programs per sandbox round")
    ap.add_argument("--out", default=None, help="the JSON (default: runs/bench/rewards.json; with --before "
                                                "runs/bench/sandbox_throughput.json)")
    ap.add_argument("--n-math", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=None, help="callers (default: pool size)")
    ap.add_argument("--before", default=None,
                    help="src folder of an older grpolab: before/after sandbox rows only")
    ap.add_argument("--user", type=int, default=None,
                    help="with --before, as root: programs run as this ordinary uid (e.g. 4242)")
    ap.add_argument("--python", default=None,
                    help="with --user: the programs' interpreter (default /usr/bin/python3)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        import json

        print(json.dumps(worker(args.n_code, args.user, args.python)))
        return
    if args.before:
        before_after(args)
        return

    pool = default_pool()
    pool.warm_up()
    threads = args.threads or pool.size
    load_before = os.getloadavg()
    rows: dict[str, list[float]] = {}
    cpu_ms: list[float] = []  # CPU (client + servers + children) per fork-server program
    code_cpu_ms: list[float] = []  # the same per code-verifier item

    def add(name: str, value: float) -> None:
        rows.setdefault(name, []).append(value)

    plain = [(f"#{i}", str(i)) for i in range(args.n_math)]
    # references that are not plain numbers, so every item goes through math-verify
    latex = [(rf"\boxed{{\frac{{\sqrt{{8}}}}{{{2 * i}}}}}", rf"\frac{{\sqrt{{2}}}}{{{i}}}")
             for i in range(1, 201)]
    if math_verify_available():  # start the verifier workers (and import math-verify) untimed
        score_batch([("math", c, r) for c, r in latex[:32]], min_parallel=1)
    for _ in range(args.rounds):
        add("math plain numbers (in process)",
            rate(len(plain), lambda: [safe_score("math", c, r) for c, r in plain]))
        if math_verify_available():
            add("math LaTeX via math-verify (in process)",
                rate(len(latex), lambda: [safe_score("math", c, r) for c, r in latex]))
            add("math LaTeX via math-verify (score_batch, worker processes)",
                rate(len(latex), lambda: score_batch([("math", c, r) for c, r in latex])))
        r, cpu, _ = _measured(args.n_code, pool,
                              lambda: sandbox_many(args.n_code, threads, "auto"))
        add(f"run_sandboxed trivial program ({threads} callers)", r)
        cpu_ms.append(cpu)
        r, cpu, _ = _measured(args.n_code, pool, lambda: code_batch(args.n_code))
        add("code verifier: fast path (score_batch)", r)
        code_cpu_ms.append(cpu)
        add("code verifier: judge path (score_batch)",
            rate(args.n_code, lambda: code_batch(args.n_code, JUDGE_TESTS)))
    load_after = os.getloadavg()

    table = {k: statistics.median(v) for k, v in rows.items()}
    width = max(len(k) for k in table)
    print(f"{'verification':<{width}}  items/s")
    for k, v in table.items():
        print(f"{k:<{width}}  {v:8.1f}")
    per_item = statistics.median(cpu_ms)
    per_code = statistics.median(code_cpu_ms)
    print(f"CPU per trivial program (caller + sandbox): {per_item:.2f} ms "
          f"-> {2000 / per_item:.0f} programs/s on 2 otherwise idle cores")
    print(f"CPU per fast-path code item: {per_code:.2f} ms "
          f"-> {2000 / per_code:.0f} items/s on 2 otherwise idle cores")
    print(f"cpus={os.cpu_count()} pool={pool.size} isolation={pool.features()} "
          f"load average before={load_before[0]:.1f} after={load_after[0]:.1f}")
    path = _out(args, "rewards.json")
    atomic_write_json(path, {
        "items_per_s": table,
        "rounds": {k: v for k, v in rows.items()},
        "cpu_ms_per_program": per_item,
        "programs_per_s_on_2_idle_cores_from_cpu": 2000 / per_item,
        "code_verifier_cpu_ms_per_item": per_code,
        "code_verifier_items_per_s_on_2_idle_cores_from_cpu": 2000 / per_code,
        "config": vars(args) | {"threads": threads, "pool_size": pool.size,
                                "isolation": list(pool.features())},
        "machine": _machine(load_before, load_after),
    })
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
