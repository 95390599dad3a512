"""The pre-registered 10-seed comparisons (studies/preregistered/README.md): run them, resumably, and
test their one primary endpoint each with grpolab.diagnostics.inference.

    python studies/preregistered/run.py run STUDY --out docs/results/prereg/STUDY [--jobs 2]
    python studies/preregistered/run.py analyse STUDY --out docs/results/prereg/STUDY

``run`` goes seed by seed: both arms of a seed run through grpolab's sweep runner (a run with a
``result.json`` is skipped, an interrupted one resumes from its checkpoint), then ``seed_<S>.json``
is written atomically; a seed that has one is skipped, so an interrupted study resumes where it
stopped. ``--seeds`` / ``--set`` run something other than the registration (a smoke test): every
record states whether it ran the registered settings (``registered``), and ``analyse`` refuses to
mix registered and other records.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

from grpolab.diagnostics.inference import paired_seed_test
from grpolab.sweep.runner import plan_sweep, run_sweep
from grpolab.utils.io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
SEEDS = list(range(100, 110))

#: the registration (README.md beside this file): config, fixed overrides, the arm factor (first
#: arm minus second), the primary endpoint, the equivalence margin
STUDIES = {
    "ba_pairsum": {
        "config": "studies/aggregation_coupled.yaml", "overrides": [],
        "factor": ("objective.aggregation", ["balanced", "token"]),
        "endpoint": "final", "margin": 0.03},
    "gspo_drift": {
        "config": "studies/ratio_long.yaml",
        "overrides": ["model.path=runs/ws_arith_long1500.snapshots/step_001000", "rollout.prompts_per_step=8",
                      "trainer.steps=100", "trainer.eval_every=25"],
        "factor": ("preset", ["gspo", "token"]), "endpoint": "final_1024", "margin": 0.02},
    "lr_arith": {
        "config": "studies/when_grpo_helps.yaml", "overrides": [],
        "factor": ("optim.lr", ["1e-4", "1e-3"]), "endpoint": "change_first_arm", "margin": None},
}


def _weights_hash(model_path: str | None) -> str | None:
    f = ROOT / str(model_path) / "model.safetensors" if model_path else None
    if f is None or not f.exists():
        return None
    return hashlib.sha256(f.read_bytes()).hexdigest()[:16]


def _eval_1024(run_dir: Path) -> float:
    """The run's final model, greedy on 1,024 held-out items (``grpolab eval``)."""
    out = subprocess.run([sys.executable, "-m", "grpolab.cli", "eval", str(run_dir), "--n", "1024", "--samples", "0",
                          "--examples", "0"], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["greedy_accuracy"])


def _code_version() -> dict:
    """The commit the seed ran on, and whether the checkout had uncommitted changes (a study spans sessions,
    so its seeds may run on different commits: each record says which)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(git("status", "--porcelain", "--", "src"))}


def run_seed(study: str, seed: int, out: Path, extra: list[str], jobs: int) -> dict:
    """Both arms of one seed; returns the seed's record (also written to ``out/seed_<S>.json``)."""
    spec = STUDIES[study]
    key, arms = spec["factor"]
    t0 = time.time()
    sweep_out, specs = plan_sweep(ROOT / spec["config"], spec["overrides"] + extra, [f"{key}={','.join(arms)}"],
                                  [seed], out / "runs")
    res = run_sweep(sweep_out, specs, jobs=jobs)
    if any(res.status.get(s.name) not in ("done", "skipped") for s in specs):
        raise RuntimeError(f"seed {seed}: runs did not finish ({res.status}); rerun to resume")
    record = {"study": study, "seed": seed, "registered": seed in SEEDS and not extra, "extra_overrides": extra,
              "config": spec["config"], "overrides": spec["overrides"], "arms": {}}
    for s, arm in zip(specs, arms):
        run_dir = sweep_out / "runs" / s.name
        r = json.loads((run_dir / "result.json").read_text())
        entry = {"run": str(run_dir), "start": r["start_accuracy"], "final": r["final_accuracy"],
                 "best": r["best_accuracy"], "seconds": r["seconds_this_process"]}
        if spec["endpoint"] == "final_1024":
            entry["final_1024"] = _eval_1024(run_dir)
        record["arms"][arm] = entry
    from grpolab.config import load_config

    record["warm_start"] = load_config(ROOT / spec["config"], spec["overrides"] + extra).model.path
    record["warm_start_sha256_16"] = _weights_hash(record["warm_start"])
    record["code"] = _code_version()
    record["wall_seconds"] = time.time() - t0
    atomic_write_json(out / f"seed_{seed}.json", record)
    return record


def endpoint(study: str, record: dict) -> tuple[float, float]:
    """The (a, b) pair of one seed whose difference is the primary endpoint."""
    spec = STUDIES[study]
    first, second = spec["factor"][1]
    a, b = record["arms"][first], record["arms"][second]
    if spec["endpoint"] == "change_first_arm":
        return a["final"], a["start"]
    return a[spec["endpoint"]], b[spec["endpoint"]]


def analyse(study: str, out: Path, *, partial: bool = False) -> dict:
    """The registered test on every seed record under ``out``; writes ``out/analysis.json`` and RESULTS.md.

    The registration reads the endpoint once, after the last registered seed: before that it refuses, unless
    ``partial`` (a look the registration does not allow, labelled as such in the result)."""
    records = [json.loads(p.read_text()) for p in sorted(out.glob("seed_*.json"))]
    if not records:
        raise SystemExit(f"no seed records under {out}: run the study first")
    if len({r["registered"] for r in records}) > 1:
        raise SystemExit(f"{out} mixes registered and other records; analyse them apart")
    done = sorted(r["seed"] for r in records)
    if records[0]["registered"] and done != SEEDS and not partial:
        raise SystemExit(f"{len(done)} of the {len(SEEDS)} registered seeds are recorded: the registration reads the "
                         "endpoint once, after the last one (README.md); finish the study (run.py run resumes it)")
    pairs = [endpoint(study, r) for r in records]
    spec = STUDIES[study]
    c = paired_seed_test([a for a, _ in pairs], [b for _, b in pairs], margin=spec["margin"])
    first, second = spec["factor"][1]
    what = f"{first} - start" if spec["endpoint"] == "change_first_arm" else f"{first} - {second}"
    res = {"study": study, "seeds": [r["seed"] for r in records], "registered": records[0]["registered"],
           "complete": done == SEEDS, "partial_look": records[0]["registered"] and done != SEEDS, "endpoint": spec["endpoint"],
           "comparison": c.to_dict(), "summary": c.summary(scale=100, what=f"{what} (points)")}
    atomic_write_json(out / "analysis.json", res)
    atomic_write_text(out / "RESULTS.md", f"# {study}\n\n{res['summary']}\n\nSeeds: {res['seeds']}; registered "
                      f"settings: {res['registered']}; all registered seeds: {res['complete']}.\n")
    print(res["summary"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["run", "analyse"])
    ap.add_argument("study", choices=sorted(STUDIES))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seeds", type=int, nargs="+", default=SEEDS, help="not the registration: a smoke test")
    ap.add_argument("--set", action="append", default=[], help="not the registration: a smoke test")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--partial", action="store_true",
                    help="analyse before every registered seed is in: a look the registration does not allow "
                         "(the result says so)")
    args = ap.parse_args()
    if args.cmd == "analyse":
        analyse(args.study, args.out, partial=args.partial)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        if (args.out / f"seed_{seed}.json").exists():
            print(f"seed {seed}: recorded, skipped")
            continue
        rec = run_seed(args.study, seed, args.out, args.set, args.jobs)
        # no accuracy here: the endpoint is read once, by `analyse`, after the last registered seed
        print(f"seed {seed}: recorded ({rec['wall_seconds']:.0f} s wall)")


if __name__ == "__main__":
    main()
