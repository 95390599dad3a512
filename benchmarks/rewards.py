"""Verifier throughput: math verification and sandboxed code verification, items per second.

Rows:
  * math / plain numbers: ``safe_score("math", "#<n>", "<n>")`` in this process;
  * math / LaTeX via math-verify: ``\\boxed{\\frac{a}{b}}`` against ``\\frac{2a}{2b}``, in this
    process, and through ``score_batch`` (verifier worker processes, one per CPU);
  * sandbox / run_sandboxed: a trivial program (``print(6 * 7)``) through the fork-server pool
    (``--threads`` callers, default one per pool server) vs ``mode="fresh"`` (a new sandbox
    server process -- a fresh interpreter that sets up the same namespaces -- per program);
  * code verifier: ``score("code", "def f(x): return x + 1", ["assert f(1) == 2"])`` through the
    pool (``score_batch``) vs fresh.

Fork-server and fresh rows are measured in alternating rounds so machine load hits both alike;
each number is the median over ``--rounds`` rounds. The machine is shared: read ratios rather
than absolute numbers when the load average is high (it is printed and saved). A load-free
figure: the CPU seconds one fork-server program costs in total (this process + the servers +
the children they reaped, from /proc), turned into programs/s for 2 otherwise idle cores.

Run:  python benchmarks/rewards.py [--rounds 3] [--n-code 400] [--n-fresh 24]
Writes benchmarks/results/rewards.json (atomically).

Before/after:  python benchmarks/rewards.py --before /path/to/old/src [--rounds 5]
measures only the fork-server rows (trivial program, code verifier) for the grpolab under
``--before`` and for this one, each round in a fresh subprocess per side, sides alternating, and
prints the medians and after/before ratios; writes benchmarks/results/rewards_before_after.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grpolab.rewards import run_sandboxed, safe_score, score_batch
from grpolab.rewards.math import math_verify_available
from grpolab.rewards.sandbox import default_pool
from grpolab.utils.io import atomic_write_json

RESULTS = Path(__file__).resolve().parent / "results" / "rewards.json"
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


def code_batch(n: int, mode: str, threads: int, tests: list[str] = TESTS) -> None:
    if mode == "forkserver":
        out = score_batch([("code", CODE, tests)] * n)
    else:
        with ThreadPoolExecutor(threads) as ex:
            out = list(ex.map(lambda _: safe_score("code", CODE, TESTS, mode="fresh"), range(n)))
    assert all(r.score == 1.0 for r in out), [r.info for r in out if r.score != 1.0][:2]


def cpu_seconds(server_pids: list[int]) -> float:
    """CPU time so far of this process, its sandbox servers and everything they reaped."""
    t = os.times()
    total = t.user + t.system
    tick = os.sysconf("SC_CLK_TCK")
    for pid in server_pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        except OSError:
            pass
    return total


def worker(n: int) -> dict:
    """One round of the fork-server rows in this process (for ``--before``)."""
    pool = default_pool()
    pool.warm_up()
    sandbox_many(20, pool.size, "forkserver")  # warm
    code_batch(20, "forkserver", pool.size)
    pids = [srv.proc.pid for srv in pool._all]
    c0 = cpu_seconds(pids)
    trivial = rate(n, lambda: sandbox_many(n, pool.size, "forkserver"))
    c1 = cpu_seconds(pids)
    code = rate(n, lambda: code_batch(n, "forkserver", pool.size))
    c2 = cpu_seconds(pids)
    judge = rate(n, lambda: code_batch(n, "forkserver", pool.size, JUDGE_TESTS))
    c3 = cpu_seconds(pids)
    return {"trivial_per_s": trivial, "code_per_s": code, "code_judge_per_s": judge,
            "trivial_cpu_ms": (c1 - c0) / n * 1000, "code_cpu_ms": (c2 - c1) / n * 1000,
            "code_judge_cpu_ms": (c3 - c2) / n * 1000, "isolation": list(pool.features())}


def before_after(args) -> None:
    import json
    import subprocess
    import sys

    here = str(Path(__file__).resolve().parents[1] / "src")
    sides = {"before": str(Path(args.before).resolve()), "after": here}
    runs: dict[str, list[dict]] = {k: [] for k in sides}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, src in sides.items():
            env = dict(os.environ, PYTHONPATH=src)
            out = subprocess.run([sys.executable, __file__, "--worker", "--n-code", str(args.n_code)],
                                 env=env, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    load_after = os.getloadavg()
    keys = ("trivial_per_s", "code_per_s", "code_judge_per_s", "trivial_cpu_ms", "code_cpu_ms",
            "code_judge_cpu_ms")
    med = {n: {k: statistics.median(r[k] for r in rs) for k in keys} for n, rs in runs.items()}
    print(f"{'fork server, ' + str(args.n_code) + ' programs/round':<44}  {'before':>9}  "
          f"{'after':>9}  after/before")
    labels = {"trivial_per_s": "run_sandboxed trivial program (items/s)",
              "code_per_s": "code verifier, score_batch (items/s)",
              "code_judge_per_s": "code verifier, multi-statement test (items/s)",
              "code_judge_cpu_ms": "CPU per multi-statement code item (ms)",
              "trivial_cpu_ms": "CPU per trivial program (ms)",
              "code_cpu_ms": "CPU per code-verifier item (ms)"}
    for k in keys:
        b, a = med["before"][k], med["after"][k]
        print(f"{labels[k]:<44}  {b:9.2f}  {a:9.2f}  x{a / b:.3f}")
    for n in sides:
        print(f"{n}: {sides[n]} isolation={runs[n][0]['isolation']}")
    print(f"rounds={args.rounds} cpus={os.cpu_count()} load average before={load_before[0]:.1f} "
          f"after={load_after[0]:.1f}")
    path = RESULTS.with_name("rewards_before_after.json")
    atomic_write_json(path, {"median": med, "rounds": runs, "sides": sides,
                             "config": {"rounds": args.rounds, "n_code": args.n_code},
                             "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                         "load_average_before": load_before,
                                         "load_average_after": load_after}})
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-code", type=int, default=400, help="programs per fork-server round")
    ap.add_argument("--n-fresh", type=int, default=24, help="programs per fresh-mode round")
    ap.add_argument("--n-math", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=None, help="callers (default: pool size)")
    ap.add_argument("--before", default=None,
                    help="src folder of an older grpolab: before/after fork-server rows only")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        import json

        print(json.dumps(worker(args.n_code)))
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
        pids = [srv.proc.pid for srv in pool._all]
        c0 = cpu_seconds(pids)
        add(f"run_sandboxed trivial program: fork server ({threads} callers)",
            rate(args.n_code, lambda: sandbox_many(args.n_code, threads, "forkserver")))
        cpu_ms.append((cpu_seconds(pids) - c0) / args.n_code * 1000)
        add(f"run_sandboxed trivial program: fresh interpreter ({threads} callers)",
            rate(args.n_fresh, lambda: sandbox_many(args.n_fresh, threads, "fresh")))
        pids = [srv.proc.pid for srv in pool._all]
        c0 = cpu_seconds(pids)
        add("code verifier: fork server (score_batch)",
            rate(args.n_code, lambda: code_batch(args.n_code, "forkserver", threads)))
        code_cpu_ms.append((cpu_seconds(pids) - c0) / args.n_code * 1000)
        add(f"code verifier: fresh interpreter ({threads} callers)",
            rate(args.n_fresh, lambda: code_batch(args.n_fresh, "fresh", threads)))
    load_after = os.getloadavg()

    table = {k: statistics.median(v) for k, v in rows.items()}
    width = max(len(k) for k in table)
    print(f"{'verification':<{width}}  items/s")
    for k, v in table.items():
        print(f"{k:<{width}}  {v:8.1f}")
    fs = [v for k, v in table.items() if "run_sandboxed" in k]
    cv = [v for k, v in table.items() if k.startswith("code verifier")]
    print(f"fork server / fresh: run_sandboxed x{fs[0] / fs[1]:.1f}, code verifier x{cv[0] / cv[1]:.1f}")
    per_item = statistics.median(cpu_ms)
    per_code = statistics.median(code_cpu_ms)
    print(f"fork server CPU per trivial program (client + server + child): {per_item:.2f} ms "
          f"-> {2000 / per_item:.0f} programs/s on 2 otherwise idle cores")
    print(f"fork server CPU per code-verifier item: {per_code:.2f} ms "
          f"-> {2000 / per_code:.0f} items/s on 2 otherwise idle cores")
    print(f"cpus={os.cpu_count()} pool={pool.size} isolation={pool.features()} "
          f"load average before={load_before[0]:.1f} after={load_after[0]:.1f}")
    atomic_write_json(RESULTS, {
        "items_per_s": table,
        "rounds": {k: v for k, v in rows.items()},
        "forkserver_cpu_ms_per_program": per_item,
        "forkserver_programs_per_s_on_2_idle_cores_from_cpu": 2000 / per_item,
        "code_verifier_cpu_ms_per_item": per_code,
        "code_verifier_items_per_s_on_2_idle_cores_from_cpu": 2000 / per_code,
        "speedup_forkserver_vs_fresh": {"run_sandboxed": fs[0] / fs[1], "code_verifier": cv[0] / cv[1]},
        "config": vars(args) | {"threads": threads, "pool_size": pool.size,
                                "isolation": list(pool.features())},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(),
                    "load_average_before": load_before, "load_average_after": load_after},
    })
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
