"""grpolab.sweep: grids of training runs (``grpolab sweep``) and variant comparisons (``grpolab compare``).

* :func:`plan_sweep` + :func:`run_sweep` -- Cartesian grid x seeds (or the rows of a design file,
  :func:`load_design`, e.g. an orthogonal array; :func:`design_balance` checks it), one subprocess per run, J at a
  time, resumable (finished runs are skipped, interrupted ones resume from their checkpoint).
* :func:`write_sweep_summary` -- one row per run, per-factor effects with CIs, collapse labels, plots.
* :func:`write_comparison` -- variants x seeds: CIs, paired differences vs a baseline, curves with
  bands, and the training statistics that explain a difference.
"""

from grpolab.sweep.grid import RunSpec, design_balance, design_factors, expand_grid, load_design, parse_factor, run_name
from grpolab.sweep.runner import SweepRun, available_cores, load_specs, plan_sweep, run_sweep
from grpolab.sweep.summary import RunRow, collect_runs, factor_effects, write_sweep_summary

__all__ = [
    "RunRow",
    "RunSpec",
    "SweepRun",
    "available_cores",
    "collect_runs",
    "design_balance",
    "design_factors",
    "expand_grid",
    "factor_effects",
    "load_design",
    "load_specs",
    "parse_factor",
    "plan_sweep",
    "run_name",
    "run_sweep",
    "write_sweep_summary",
]
