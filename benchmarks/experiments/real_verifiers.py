"""The verifier families on the real model (issue 61): starting accuracy, preflight, sandbox load, gains.

Every stage runs one ``grpolab`` command as a child process (``OMP_NUM_THREADS=1``), keeps its
stdout/stderr under ``runs/real_verifiers/NAME/`` and merges one record per run into
``docs/results/real_verifiers.json`` under ``runs.NAME``: the command, its exit status, wall time,
the peak resident memory of the largest process of its tree (``os.wait4``), the commit, and what the
stage measured. A name already recorded with exit status 0 is skipped (resumable: rerun the same
command after an interruption); ``--force`` runs it again.

    S="python benchmarks/experiments/real_verifiers.py"; O="--out docs/results/real_verifiers.json"
    $S eval base-code-L1 --family code --level 1 --cap 48 $O
    $S preflight pf-code-L1 --family code --level 1 --cap 48 --n 64 --seed 12 $O \\
        --extra --until-decided 16 --no-readability --budget 900
    $S train grpo-code-L1-s11 --family code --level 1 --cap 48 --seed 11 --set trainer.steps=10 $O
    $S train off-code-L1-s11 --family code --level 1 --cap 48 --seed 11 --set trainer.steps=3 \\
        --set 'task.options.reward=real_verifiers:coin_reward' $O
    $S eval grpo-code-L1-s11-eval --family code --level 1 --cap 48 --model runs/real_verifiers/grpo-code-L1-s11 $O
    $S report $O --gains base-code-L1 grpo-code-L1-s11-eval grpo-code-L1-s12-eval

(docs/results/real_verifiers.md lists every command as run.) Without ``--out`` records go to
``runs/bench/real_verifiers.json``.

``eval`` of a run directory measures its final model with the same config, levels, cap and
``trainer.seed=0`` as the starting model, so both see the same held-out items (checked by prompt in
``report``'s paired gains). ``coin_reward`` is the "reward off" of the sandbox-overhead pair: a
pseudo-random 0/1 from a hash of the completion (no sandbox, yet groups keep their signal so the
update does the same work).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpolab import bench

ROOT = Path(__file__).resolve().parents[2]
OUT = bench.results_path("real_verifiers.json")  # the committed record: --out docs/results/real_verifiers.json
RUNS = Path("runs") / "real_verifiers"
MODEL = "models/smollm2-135m-instruct"
FAMILIES = ("code", "sql", "json")
#: seeds of the frozen held-out study (studies/preflight_heldout/): never used here
FORBIDDEN_SEEDS = frozenset(range(1000, 1008)) | {2000, 2001, 3000}


@dataclass
class Record:
    """One run of one stage: what ran, how long, how much memory, what it measured."""

    name: str
    kind: str
    argv: list[str]
    rc: int
    wall_s: float
    peak_rss_mb: float
    commit: str
    finished_at: str
    result: dict = field(default_factory=dict)
    note: str = ""


def config_of(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: choose one of {FAMILIES}")
    return f"examples/smollm2_{family}.yaml"


def check_seed(seed: int) -> int:
    if seed in FORBIDDEN_SEEDS:
        raise ValueError(f"seed {seed} belongs to the frozen held-out study (studies/preflight_heldout/); "
                         "pick another")
    return seed


def coin_reward(completion: str, reference: str, **options) -> float:
    """The "reward off" condition: 0 or 1 from a hash of the completion; no verifier, no sandbox."""
    return float(hashlib.sha256(completion.encode()).digest()[0] & 1)


def _commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def run_logged(argv: list[str], folder: Path) -> tuple[int, float, float]:
    """Run ``argv`` in the repository root with stdout/stderr into ``folder`` (relative: to the root);
    return (exit status, wall seconds, peak RSS MiB of the largest process of its tree)."""
    folder = ROOT / folder
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT / "benchmarks" / "experiments"),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if argv[0] == "grpolab":
        argv = [sys.executable, "-m", "grpolab.cli"] + argv[1:]
    t0 = time.time()
    with open(folder / "stdout.txt", "w") as out, open(folder / "stderr.txt", "w") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.time() - t0, usage.ru_maxrss / 1024.0


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {"runs": {}}


def save_record(path: Path, record: Record) -> None:
    """Merge ``record`` into ``path`` (re-read first: records written meanwhile are kept), atomically."""
    from grpolab.utils.io import atomic_write_json

    doc = load(path)
    doc.setdefault("runs", {})[record.name] = asdict(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, doc)


def recorded(doc: dict, name: str) -> bool:
    """Whether ``name`` already has a successful record (then its stage is skipped)."""
    return doc.get("runs", {}).get(name, {}).get("rc") == 0


def eval_argv(model: str, family: str, level: int, n: int, cap: int, folder: Path, sets=()) -> list[str]:
    argv = ["grpolab", "eval", model, "--config", config_of(family), "--set", f"task.options.levels=[{level}]",
            "--set", "trainer.seed=0", "--samples", "0", "--n", str(n), "--max-new-tokens", str(cap),
            "--examples", "0", "--completions", str(folder / "completions.jsonl")]
    for s in sets:
        argv += ["--set", s]
    return argv


def block_closed(text: str) -> bool:
    """Whether the completion holds a fenced block that is closed (the answer was not cut off)."""
    return text.count("```") >= 2


def parse_eval(folder: Path) -> dict:
    """Greedy accuracy, mean reward (partial credit), per-item scores by prompt, closed-block share."""
    report = json.loads((folder / "stdout.txt").read_text())
    rows = [json.loads(line) for line in (folder / "completions.jsonl").read_text().splitlines() if line]
    scores = [float(r["reward"]) for r in rows]
    return {"items": len(rows), "greedy_accuracy": report["greedy_accuracy"],
            "mean_reward": sum(scores) / len(scores), "max_new_tokens": report["max_new_tokens"],
            "closed_block_frac": sum(block_closed(r["completion"]) for r in rows) / len(rows),
            "prompt_hashes": [hashlib.sha256(r["prompt"].encode()).hexdigest()[:12] for r in rows],
            "scores": scores}


def parse_preflight(folder: Path) -> dict:
    doc = json.loads((folder / "preflight.json").read_text())
    keep = {k: doc[k] for k in doc if k not in ("items", "per_item", "chunks")}
    return {"preflight": keep, "md": str(folder / "preflight.md")}


def parse_train(run_dir: Path) -> dict:
    """Per-step times, reward throughput and errors from ``metrics.jsonl`` (one row per step)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line]
    steps = [r for r in rows if "time/step" in r]
    keys = ("step", "time/step", "time/rollout", "time/reward", "time/update", "time/reward_frac",
            "time/reward_per_s", "reward/errors", "reward/mean", "memory/peak_rss_mb", "eval/accuracy")
    per_step = [{k: r.get(k) for k in keys} for r in steps]
    evals = [{"step": r.get("step"), "eval/accuracy": r["eval/accuracy"]} for r in rows if "eval/accuracy" in r]
    return {"steps": len(steps), "per_step": per_step, "evals": evals, "summary": summarise_steps(per_step)}


def summarise_steps(per_step: list[dict]) -> dict:
    """Means over the steps after the first (the first pays start-up: pool, caches) and totals."""
    tail = per_step[1:] or per_step

    def mean(key):
        vals = [r[key] for r in tail if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    return {"steps_in_means": len(tail), "time_step_mean": mean("time/step"),
            "time_reward_mean": mean("time/reward"), "reward_frac_mean": mean("time/reward_frac"),
            "reward_per_s_mean": mean("time/reward_per_s"),
            "reward_errors_total": sum(r.get("reward/errors") or 0 for r in per_step)}


def timed_outside(folder: Path) -> tuple[int, float, float] | None:
    """(exit status, wall s, peak MiB) of a command run by hand under ``/usr/bin/time -v -o time.txt``
    with its exit status in ``rc`` (same files as :func:`run_logged`); None when there is none."""
    if not ((folder / "rc").exists() and (folder / "time.txt").exists()):
        return None
    text = (folder / "time.txt").read_text()
    peak = wall = None
    for line in text.splitlines():
        key, _, value = line.strip().rpartition(": ")
        if key.startswith("Maximum resident set size"):
            peak = int(value) / 1024.0
        elif key.startswith("Elapsed (wall clock) time"):
            parts = [float(x) for x in value.split(":")]
            wall = sum(x * 60 ** i for i, x in enumerate(reversed(parts)))
    if peak is None or wall is None:
        raise ValueError(f"{folder / 'time.txt'} is not /usr/bin/time -v output")
    return int((folder / "rc").read_text()), wall, peak


def run_stage(args, kind: str, argv: list[str], folder: Path, parse) -> None:
    doc = load(args.out)
    if recorded(doc, args.name) and not args.force:
        print(f"{args.name}: recorded, skipped (--force reruns it)")
        return
    ran = timed_outside(ROOT / folder) if args.ingest else None
    rc, wall, peak = ran if ran is not None else run_logged(argv, folder)
    result = parse() if rc == 0 else {"stderr_tail": (folder / "stderr.txt").read_text()[-2000:]}
    rec = Record(name=args.name, kind=kind, argv=argv, rc=rc, wall_s=round(wall, 1), peak_rss_mb=round(peak, 1),
                 commit=_commit(), finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 result=result, note=args.note)
    save_record(args.out, rec)
    print(json.dumps({"name": rec.name, "rc": rc, "wall_s": rec.wall_s, "peak_rss_mb": rec.peak_rss_mb}))


def stage_eval(args) -> None:
    folder = RUNS / args.name
    model = args.model
    if (ROOT / model / "run" / "final").is_dir():  # a stage's folder: its trained model
        model = str(Path(model) / "run" / "final")
    argv = eval_argv(model, args.family, args.level, args.n, args.cap, folder, args.set)
    run_stage(args, "eval", argv, folder, lambda: parse_eval(ROOT / folder))


def stage_preflight(args) -> None:
    folder = RUNS / args.name
    argv = ["grpolab", "preflight", args.model, "--config", config_of(args.family), "--set",
            f"task.options.levels=[{args.level}]", "--set", f"rollout.max_new_tokens={args.cap}", "--n", str(args.n),
            "--seed", str(check_seed(args.seed)), "--out", str(folder)] + args.extra
    for s in args.set:
        argv += ["--set", s]
    run_stage(args, "preflight", argv, folder, lambda: parse_preflight(ROOT / folder))


def stage_train(args) -> None:
    folder = RUNS / args.name
    argv = ["grpolab", "train", config_of(args.family), "--set", f"task.options.levels=[{args.level}]",
            "--set", f"trainer.seed={check_seed(args.seed)}", "--set", f"trainer.run_dir={folder / 'run'}",
            "--set", f"rollout.max_new_tokens={args.cap}", "--set", "trainer.preflight=false",
            "--set", "log.tensorboard=false", "--set", "log.plots=false", "--set", "log.progress=false",
            "--overwrite"]
    for s in args.set:
        argv += ["--set", s]
    run_stage(args, "train", argv, folder, lambda: parse_train(ROOT / folder / "run"))


def stage_sft(args) -> None:
    folder = RUNS / args.name
    argv = ["grpolab", "sft", config_of(args.family), "--set", f"task.options.levels=[{args.level}]",
            "--set", f"trainer.seed={check_seed(args.seed)}", "--set", f"rollout.max_new_tokens={args.cap}",
            "--out", str(folder / "model"), "--overwrite"]
    for s in args.set:
        argv += ["--set", s]
    run_stage(args, "sft", argv, folder, lambda: {"model": str(folder / "model")})


def paired_gains(doc: dict, base: str, tuned: list[str]) -> dict:
    """Per-seed held-out gains (tuned minus base, same items: checked by prompt) and the paired seed test."""
    from grpolab.diagnostics.inference import paired_seed_test

    runs = doc["runs"]
    b = runs[base]["result"]
    gains, means = [], []
    for name in tuned:
        t = runs[name]["result"]
        if t["prompt_hashes"] != b["prompt_hashes"]:
            raise ValueError(f"{name} and {base} were scored on different held-out items; rerun with the same "
                             "--n, levels and trainer.seed=0")
        gains.append(t["greedy_accuracy"] - b["greedy_accuracy"])
        means.append(t["mean_reward"] - b["mean_reward"])
    out = {"base": base, "tuned": tuned, "accuracy_gains": gains, "mean_reward_gains": means}
    if len(tuned) >= 2:
        test = paired_seed_test([runs[n]["result"]["greedy_accuracy"] for n in tuned],
                                [b["greedy_accuracy"]] * len(tuned))
        out["test"] = test.to_dict()
        out["summary"] = test.summary(scale=100.0, what="tuned - start (points)")
    return out


def table(doc: dict) -> str:
    lines = ["| run | kind | rc | wall s | peak MiB | result |", "|---|---|---|---|---|---|"]
    for name, r in doc.get("runs", {}).items():
        res = r.get("result", {})
        if r["kind"] == "eval" and "greedy_accuracy" in res:
            what = (f"greedy {res['greedy_accuracy']:.3f}, mean reward {res['mean_reward']:.3f}, closed block "
                    f"{res['closed_block_frac']:.2f} ({res['items']} items, cap {res['max_new_tokens']})")
        elif r["kind"] == "train" and "summary" in res:
            s = res["summary"]
            what = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items())
        elif r["kind"] == "preflight" and "preflight" in res:
            what = f"see {res['md']}"
        else:
            what = "-"
        lines.append(f"| {name} | {r['kind']} | {r['rc']} | {r['wall_s']} | {r['peak_rss_mb']} | {what} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("stage", choices=("eval", "preflight", "train", "sft", "report"))
    ap.add_argument("name", nargs="?", default="")
    ap.add_argument("--family", choices=FAMILIES, default="code")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--cap", type=int, default=48, help="rollout.max_new_tokens")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--set", action="append", default=[], help="config override key=value (repeatable)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more preflight arguments")
    ap.add_argument("--gains", nargs="+", default=[], help="report: BASE TUNED... paired gains")
    ap.add_argument("--note", default="")
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--ingest", action="store_true", help="record the same command already run by hand under "
                    "/usr/bin/time -v -o RUNS/NAME/time.txt (exit status in RUNS/NAME/rc) instead of running it")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.stage != "report" and not args.name:
        ap.error("a run name is required")
    {"eval": stage_eval, "preflight": stage_preflight, "train": stage_train, "sft": stage_sft,
     "report": lambda a: None}[args.stage](args)
    doc = load(args.out)
    if args.gains:
        print(json.dumps(paired_gains(doc, args.gains[0], args.gains[1:]), indent=1))
    print(table(doc))


if __name__ == "__main__":
    sys.exit(main())
