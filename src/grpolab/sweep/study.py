"""Variants x seeds of a ``grpolab compare`` directory, read as a study: each run's held-out curve
(area, largest drop, first step reaching a target), per-variant results in seed order, and paired
differences to a baseline by seed. The study scripts (studies/study_json.py,
studies/aggregation_coupled_tables.py) build their tables from these.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from grpolab import step_row as K
from grpolab.diagnostics import compare_family
from grpolab.train.metrics_log import read_metrics

__all__ = ["collect", "curve_auc", "eval_curve", "first_reach", "fmt_diff", "max_drop", "paired"]


def eval_curve(rows: list[dict]) -> tuple[list[int], list[float]]:
    """``(steps, accuracies)`` of the rows that carry ``eval/accuracy`` (step 0 = before RL)."""
    pts = [(int(r["step"]), float(r[K.EVAL_ACCURACY])) for r in rows if r.get(K.EVAL_ACCURACY) is not None]
    pts = sorted(dict(pts).items())
    return [s for s, _ in pts], [a for _, a in pts]


def curve_auc(steps: list[int], acc: list[float]) -> float:
    """Trapezoid area under ``acc(steps)`` divided by the step range: the mean accuracy over training."""
    if len(steps) < 2:
        return acc[0]
    area = sum((steps[i + 1] - steps[i]) * (acc[i] + acc[i + 1]) / 2 for i in range(len(steps) - 1))
    return area / (steps[-1] - steps[0])


def max_drop(acc: list[float]) -> float:
    """The largest fall of ``acc`` below its best so far (0 when it never falls): how far a run
    that learned went back, a milder instability than a collapse."""
    best, drop = float("-inf"), 0.0
    for a in acc:
        best = max(best, a)
        drop = max(drop, best - a)
    return drop


def first_reach(steps: list[int], acc: list[float], target: float) -> int | None:
    """First eval step with ``acc >= target`` (None if never)."""
    return next((s for s, a in zip(steps, acc) if a >= target - 1e-12), None)


def collect(out: Path, metrics: list[str], per_run: Callable[[list[dict]], Any] | None = None) -> dict[str, dict]:
    """Per variant (``sweep.json``'s factor values), its finished runs' results in seed order.

    With ``per_run``, each run's ``per_run(metrics.jsonl rows)`` too, under ``"per_run"`` (same order)."""
    plan = json.loads((out / "sweep.json").read_text())
    variants: dict[str, dict] = {}
    for run in plan["runs"]:
        run_dir = out / "runs" / run["name"]
        if not (run_dir / "result.json").exists():
            continue
        rows = read_metrics(run_dir)
        steps, acc = eval_curve(rows)
        start = json.loads((run_dir / "result.json").read_text()).get("start_accuracy")
        if start is not None and (not steps or steps[0] > 0):  # the step-0 evaluation is in result.json
            steps, acc = [0, *steps], [float(start), *acc]
        if not steps:
            continue
        name = ",".join(str(v) for v in run["factors"].values())
        v = variants.setdefault(name, {"seeds": [], "final": [], "start": [], "best": [], "auc": [], "max_drop": [],
                                       "curve": {"steps": steps, "accuracy": []}, "collapsed": 0,
                                       "metrics": {m: [] for m in metrics}, **({"per_run": []} if per_run else {})})
        v["seeds"].append(run["seed"])
        v["final"].append(acc[-1])
        v["start"].append(acc[0])
        v["best"].append(max(acc))
        v["auc"].append(curve_auc(steps, acc))
        v["max_drop"].append(max_drop(acc))
        v["curve"]["accuracy"].append(acc)
        v["collapsed"] += int(min(acc[1:] or acc) < 0.5 * acc[0])
        for m in metrics:
            vals = [float(r[m]) for r in rows if isinstance(r.get(m), (int, float))]
            v["metrics"][m].append(sum(vals) / len(vals) if vals else None)
        if per_run:
            v["per_run"].append(per_run(rows))
    for v in variants.values():  # seed order
        order = sorted(range(len(v["seeds"])), key=lambda i: v["seeds"][i])
        for k in ("seeds", "final", "start", "best", "auc", "max_drop", *(("per_run",) if per_run else ())):
            v[k] = [v[k][i] for i in order]
        v["curve"]["accuracy"] = [v["curve"]["accuracy"][i] for i in order]
        v["metrics"] = {m: [xs[i] for i in order] for m, xs in v["metrics"].items()}
    return variants


def paired(variants: dict[str, dict], baseline: str) -> dict[str, dict]:
    """Per variant but the baseline, its paired difference to ``baseline`` (by seed) of the final
    accuracy (the primary endpoint), the curve area and the largest drop: each a
    :class:`~grpolab.diagnostics.inference.PairedComparison` dict (t interval, exact sign-flip p below
    20 seeds, Holm's correction across the variants per endpoint, verdict, MDE) and up/down counts;
    also sets each variant's ``steps_to_baseline_final``. One shared seed gives the difference alone."""
    base = variants[baseline]
    by_seed = {s: i for i, s in enumerate(base["seeds"])}
    out: dict[str, dict] = {}
    fams: dict[str, dict] = {"final": {}, "auc": {}, "max_drop": {}}
    for name, v in variants.items():
        idx = [(i, by_seed[s]) for i, s in enumerate(v["seeds"]) if s in by_seed]
        steps = v["curve"]["steps"]
        v["steps_to_baseline_final"] = [
            first_reach(steps, v["curve"]["accuracy"][i], base["final"][j]) for i, j in idx]
        if name == baseline or not idx:
            continue
        entry: dict = {"seeds": [v["seeds"][i] for i, _ in idx]}
        for k, fam in fams.items():
            a, b = [v[k][i] for i, _ in idx], [base[k][j] for _, j in idx]
            if len(idx) > 1:
                fam[name] = (a, b)
            else:
                entry[k] = {"value": a[0] - b[0]}
            entry[f"{k}_above"] = sum(x > y for x, y in zip(a, b))
            entry[f"{k}_below"] = sum(x < y for x, y in zip(a, b))
        out[name] = entry
    for k, fam in fams.items():
        for name, c in compare_family(fam).items():
            out[name][k] = c.to_dict()
    return out


def fmt_diff(c: dict) -> str:
    """A paired difference from :func:`paired`: ``+0.012 [-0.003, +0.027] (p 0.25, not significant)``,
    the 95% t interval, the (Holm-adjusted) p-value and the verdict; no interval with one seed."""
    if "low" not in c:
        return f"{c['value']:+.3f} (1 seed)"
    return f"{c['value']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] (p {c['adjusted_p']:.2g}, {c['verdict']})"
