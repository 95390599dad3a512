"""The ``grpolab sweep`` and ``grpolab compare`` commands (the CLI only parses and calls these)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Callable

from grpolab.commands.base import POSITIVE_INT, Command, add_config_args
from grpolab.errors import ConfigError

__all__ = ["COMPARE", "SWEEP", "compare_command", "sweep_command"]


def _run(config, overrides, factors_text, seeds, jobs, out, summary_only, log, design=None):
    from grpolab.sweep.grid import design_factors, parse_factor
    from grpolab.sweep.runner import load_specs, plan_sweep, run_sweep

    try:
        factors = [parse_factor(g) for g in factors_text]
        if summary_only:
            if not (Path(out) / "sweep.json").exists():
                raise ValueError(f"{out} has no sweep.json; run the sweep first")
            plan, specs = load_specs(out)
            factors = [(f["key"], f["values"]) for f in plan["factors"]]
            inv = Path(out) / "invocations.json"
            history = json.loads(inv.read_text()) if inv.exists() else []
            info = {"config": plan.get("config") or "defaults", "overrides": " ".join(plan.get("overrides", [])) or "-"}
            if plan.get("design"):
                info["design"] = f"{plan['design']} ({_balance_text(specs)})"
            if history:
                info["wall time, all recorded invocations"] = (
                    f"{sum(h['wall_seconds'] for h in history):.0f} s over {len(history)} invocation(s), "
                    f"last with {history[-1]['jobs']} jobs x {history[-1]['threads']} threads on "
                    f"{history[-1]['cores']} cores")
            return factors, specs, info
        out_, specs = plan_sweep(config, overrides, factors_text, seeds, out, design)
        if design is not None:
            factors = design_factors(specs)
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(str(e)) from None
    t0 = time.time()
    sweep = run_sweep(out_, specs, jobs=jobs, log=log)
    failed = [n for n, s in sweep.status.items() if s == "failed"]
    history = _record_invocation(Path(out_), sweep)
    info = {
        "config": str(config) if config else "defaults", "overrides": " ".join(overrides) or "-",
        **({"design": f"{design} ({_balance_text(specs)})"} if design is not None else {}),
        "runs": f"{len(specs)} ({sum(s == 'done' for s in sweep.status.values())} run now, "
                f"{sum(s == 'skipped' for s in sweep.status.values())} already finished, {len(failed)} failed)",
        "jobs": f"{sweep.jobs} at a time x {sweep.threads} torch threads on {sweep.cores} cores",
        "wall time (this invocation)": f"{time.time() - t0:.0f} s",
        "CPU busy (run processes' CPU time / (wall x cores))": f"{sweep.utilisation:.0%}",
        "machine load average at the end (1 min)": f"{os.getloadavg()[0]:.1f} on {sweep.cores} cores",
        "wall time, all invocations": f"{sum(h['wall_seconds'] for h in history):.0f} s over "
                                      f"{len(history)} invocation(s)",
    }
    log(f"sweep wall time {sweep.wall_seconds:.0f}s, cores busy {sweep.utilisation:.0%}"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return factors, specs, info


def _balance_text(specs) -> str:
    from grpolab.sweep.grid import design_balance

    bad = design_balance(specs)
    return ("every pair of factors balanced" if not bad else
            f"UNBALANCED pairs, their main effects are confounded: {', '.join(bad)}")


def _record_invocation(out: Path, sweep) -> list[dict]:
    """Append this invocation's wall/CPU time to ``OUT/invocations.json``; returns all of them."""
    from grpolab.utils.io import atomic_write_json

    path = out / "invocations.json"
    history = json.loads(path.read_text()) if path.exists() else []
    history.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": sweep.wall_seconds,
                    "cpu_seconds": sweep.cpu_seconds, "jobs": sweep.jobs, "threads": sweep.threads,
                    "cores": sweep.cores, "status": sweep.status, "loadavg": list(os.getloadavg())})
    atomic_write_json(path, history)
    return history


def sweep_command(config, overrides: list[str], grid: list[str], *, seeds: int = 1, jobs: int = 1,
                  out: str | Path = "runs/sweep", summary_only: bool = False, design: str | Path | None = None,
                  log: Callable[[str], None] = print) -> Path:
    """Plan, run (resumably) and summarise a grid or a design file; returns the summary markdown path."""
    from grpolab.sweep.summary import write_sweep_summary

    if not grid and design is None and not summary_only and seeds < 2:
        raise ConfigError("give at least one --grid KEY=V1,V2 (e.g. --grid optim.lr=1e-4,3e-4), --design FILE, "
                          "or --seeds N (N >= 2) to repeat the config over seeds")
    factors, specs, info = _run(config, overrides, grid, seeds, jobs, out, summary_only, log, design)
    md = write_sweep_summary(out, specs, factors, sweep_info=info)
    log(f"summary: {md}")
    return md


def compare_command(config, overrides: list[str], vary: list[str], *, seeds: int = 3, jobs: int = 1,
                    out: str | Path = "runs/compare", baseline: str | None = None, summary_only: bool = False,
                    log: Callable[[str], None] = print) -> Path:
    """Run each variant x seeds through the sweep runner, then write the comparison."""
    from grpolab.sweep.compare import write_comparison
    from grpolab.sweep.grid import parse_factor

    if not vary and not summary_only:
        raise ConfigError("give at least one --vary KEY=A,B (e.g. --vary objective.aggregation=token,balanced)")
    if baseline is not None and not summary_only:  # a wrong name is refused before any run, not after all
        from grpolab.sweep.compare import pick_baseline
        from grpolab.sweep.grid import expand_grid

        try:
            planned = expand_grid([parse_factor(v) for v in vary], [0])
            pick_baseline(list(dict.fromkeys(s.setting for s in planned)), planned, baseline)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    factors, specs, info = _run(config, overrides, vary, seeds, jobs, out, summary_only, log)
    try:
        md = write_comparison(out, specs, factors, baseline=baseline, info=info)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    log(f"comparison: {md}")
    return md


def _sweep_arguments(w: argparse.ArgumentParser) -> None:
    add_config_args(w)
    w.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="one factor of the grid, e.g. --grid optim.lr=1e-4,3e-4 (repeatable)")
    w.add_argument("--design", default=None, metavar="FILE",
                   help="run the points listed in a YAML file instead of a grid (runs: [{optim.lr: '1e-4', "
                        "trainer.seed: 0}, ...]; e.g. an orthogonal array, studies/web_lr_grid_design.yaml)")
    w.add_argument("--seeds", type=POSITIVE_INT, default=1, help="seeds per grid point (trainer.seed = 0..N-1)")
    w.add_argument("--jobs", type=POSITIVE_INT, default=1, help="runs at once (torch threads per run = cores // jobs)")
    w.add_argument("--out", default="runs/sweep", help="sweep directory")
    w.add_argument("--summary-only", action="store_true", help="only rewrite the summary of finished runs")


def _sweep(args: argparse.Namespace) -> int:
    sweep_command(args.config, args.overrides, args.grid, seeds=args.seeds, jobs=args.jobs, out=args.out,
                  summary_only=args.summary_only, design=args.design)
    return 0


def _compare_arguments(c: argparse.ArgumentParser) -> None:
    add_config_args(c)
    c.add_argument("--vary", action="append", default=[], metavar="KEY=A,B",
                   help="variants, e.g. --vary objective.aggregation=token,balanced (repeatable: product)")
    c.add_argument("--seeds", type=POSITIVE_INT, default=3)
    c.add_argument("--baseline", default=None, help="the variant others are compared with (a value, or "
                   "key=value,...; default: the first)")
    c.add_argument("--jobs", type=POSITIVE_INT, default=1)
    c.add_argument("--out", default="runs/compare")
    c.add_argument("--summary-only", action="store_true", help="only rewrite the comparison of finished runs")


def _compare(args: argparse.Namespace) -> int:
    compare_command(args.config, args.overrides, args.vary, seeds=args.seeds, jobs=args.jobs, out=args.out,
                    baseline=args.baseline, summary_only=args.summary_only)
    return 0


SWEEP = Command("sweep", "a grid of training runs (resumable, several at once) and its summary", _sweep_arguments,
                _sweep)
COMPARE = Command("compare", "variants x seeds: CIs, paired differences vs a baseline, explanations",
                  _compare_arguments, _compare)
