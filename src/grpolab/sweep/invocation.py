"""One invocation of ``grpolab sweep`` or ``grpolab compare``: plan (or reload) the runs, run them
resumably, record the invocation's wall and CPU time (``OUT/invocations.json``), and the facts the
summary states about it (:class:`SweepInvocation`)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from grpolab.errors import ConfigError
from grpolab.sweep.grid import RunSpec, design_balance, design_factors, parse_factor
from grpolab.sweep.runner import load_specs, plan_sweep, run_sweep
from grpolab.utils.io import atomic_write_json

__all__ = ["SweepInvocation", "sweep_invocation"]


@dataclass
class SweepInvocation:
    """The sweep's ``factors`` (``[(key, values)]``), its runs (``specs``) and ``info``: the facts its
    summary states (config, overrides, design balance, runs done / skipped / failed, jobs, wall time)."""

    factors: list[tuple[str, list[Any]]]
    specs: list[RunSpec]
    info: dict[str, str] = field(default_factory=dict)


def sweep_invocation(config: str | None, overrides: list[str], factors_text: list[str], *, seeds: int, jobs: int,
                     out: str | Path, summary_only: bool = False, log: Callable[[str], None] = print,
                     design: str | Path | None = None) -> SweepInvocation:
    """Plan (a grid of ``factors_text`` x ``seeds``, or the rows of ``design``) and run the sweep in ``out``
    resumably, ``jobs`` runs at a time, recording this invocation's wall and CPU time; with
    ``summary_only`` reload the finished sweep instead. A bad factor or plan raises
    :class:`~grpolab.errors.ConfigError`."""
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
            return SweepInvocation(factors, specs, info)
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
    return SweepInvocation(factors, specs, info)


def _balance_text(specs) -> str:
    bad = design_balance(specs)
    return ("every pair of factors balanced" if not bad else
            f"UNBALANCED pairs, their main effects are confounded: {', '.join(bad)}")


def _record_invocation(out: Path, sweep) -> list[dict]:
    """Append this invocation's wall/CPU time to ``OUT/invocations.json``; returns all of them."""
    path = out / "invocations.json"
    history = json.loads(path.read_text()) if path.exists() else []
    history.append({"time": time.strftime("%Y-%m-%d %H:%M:%S"), "wall_seconds": sweep.wall_seconds,
                    "cpu_seconds": sweep.cpu_seconds, "jobs": sweep.jobs, "threads": sweep.threads,
                    "cores": sweep.cores, "status": sweep.status, "loadavg": list(os.getloadavg())})
    atomic_write_json(path, history)
    return history
