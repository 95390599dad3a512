"""The ``grpolab sweep`` and ``grpolab compare`` commands (the CLI only parses and calls these)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from grpolab.commands.base import POSITIVE_INT, Command, add_config_args
from grpolab.errors import ConfigError

__all__ = ["COMPARE", "SWEEP", "compare_command", "sweep_command"]


def sweep_command(config, overrides: list[str], grid: list[str], *, seeds: int = 1, jobs: int = 1,
                  out: str | Path = "runs/sweep", summary_only: bool = False, design: str | Path | None = None,
                  log: Callable[[str], None] = print) -> Path:
    """Plan, run (resumably) and summarise a grid or a design file; returns the summary markdown path."""
    from grpolab.sweep.invocation import sweep_invocation
    from grpolab.sweep.summary import write_sweep_summary

    if not grid and design is None and not summary_only and seeds < 2:
        raise ConfigError("give at least one --grid KEY=V1,V2 (e.g. --grid optim.lr=1e-4,3e-4), --design FILE, "
                          "or --seeds N (N >= 2) to repeat the config over seeds")
    inv = sweep_invocation(config, overrides, grid, seeds=seeds, jobs=jobs, out=out, summary_only=summary_only,
                           log=log, design=design)
    md = write_sweep_summary(out, inv.specs, inv.factors, sweep_info=inv.info)
    log(f"summary: {md}")
    return md


def compare_command(config, overrides: list[str], vary: list[str], *, seeds: int = 3, jobs: int = 1,
                    out: str | Path = "runs/compare", baseline: str | None = None, summary_only: bool = False,
                    log: Callable[[str], None] = print) -> Path:
    """Run each variant x seeds through the sweep runner, then write the comparison."""
    from grpolab.sweep.compare import write_comparison
    from grpolab.sweep.grid import parse_factor
    from grpolab.sweep.invocation import sweep_invocation

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
    inv = sweep_invocation(config, overrides, vary, seeds=seeds, jobs=jobs, out=out, summary_only=summary_only, log=log)
    try:
        md = write_comparison(out, inv.specs, inv.factors, baseline=baseline, info=inv.info)
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
