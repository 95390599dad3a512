"""Summaries of a sweep: one row per run, per-factor effects with t intervals over runs, plots.

Held-out success is the greedy accuracy the trainer logs (``eval/accuracy`` in metrics.jsonl,
step 0 = before RL). Collapse labels come from :func:`grpolab.diagnostics.detect_collapse` on
that curve, the per-step policy entropy (``update/entropy``), truncation and training success
(``accuracy``: it stands in for "stays at ~0" when there are too few evaluations).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from grpolab import step_row as K
from grpolab.diagnostics import detect_collapse, mean_interval
from grpolab.sweep.grid import RunSpec
from grpolab.train.metrics_log import read_metrics
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["RunRow", "collect_runs", "factor_effects", "write_sweep_summary"]


@dataclass
class RunRow:
    name: str
    setting: str
    factors: dict[str, str]
    seed: int
    status: str  # finished | unfinished
    steps: int = 0
    start: float = float("nan")
    final: float = float("nan")
    best: float = float("nan")
    collapse: str = "-"
    collapse_step: int | None = None
    collapse_reason: str = ""
    seconds: float = float("nan")
    eval_steps: list[int] = field(default_factory=list)
    eval_success: list[float] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.final - self.start

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change}


def run_success_curve(run_dir: Path, rows: list[dict] | None = None) -> tuple[list[int], list[float]]:
    """``(steps, success)`` of a run's held-out greedy evaluations with its start (step 0, before RL,
    from ``result.json``) in front. (:func:`grpolab.sweep.study.eval_curve` is the ``eval/accuracy``
    points of metrics rows alone.)"""
    rows = read_metrics(run_dir) if rows is None else rows
    steps, succ = [], []
    res = run_dir / "result.json"
    if res.exists():
        steps.append(0)
        succ.append(json.loads(res.read_text())["start_accuracy"])
    for r in rows:
        if r.get(K.EVAL_ACCURACY) is not None:
            steps.append(int(r["step"]))
            succ.append(float(r[K.EVAL_ACCURACY]))
    return steps, succ


def collect_runs(out: str | Path, specs: list[RunSpec]) -> list[RunRow]:
    out = Path(out)
    rows = []
    for spec in specs:
        run_dir = out / "runs" / spec.name
        row = RunRow(name=spec.name, setting=spec.setting, factors=spec.factors, seed=spec.seed,
                     status="unfinished")
        res = run_dir / "result.json"
        if res.exists():
            r = json.loads(res.read_text())
            metrics = read_metrics(run_dir)
            steps, succ = run_success_curve(run_dir, metrics)
            ent = [(m["step"], m.get(K.UPDATE_ENTROPY)) for m in metrics]
            v = detect_collapse(steps, succ, [s for s, _ in ent], [e for _, e in ent],
                                [m["step"] for m in metrics], [m.get(K.LENGTH_TRUNCATED_FRAC) for m in metrics],
                                [m["step"] for m in metrics], [m.get("accuracy") for m in metrics])
            row.status = "finished"
            row.steps, row.start, row.final, row.best = r["steps"], r["start_accuracy"], r["final_accuracy"], r["best_accuracy"]
            row.collapse, row.collapse_step, row.collapse_reason = v.label, v.step, v.reason
            row.eval_steps, row.eval_success = steps, succ
            row.seconds = sum(m.get(K.TIME_STEP, 0.0) or 0.0 for m in metrics)
        rows.append(row)
    return rows


def _cell(ci: dict, sign: str = "") -> str:
    """``0.430 [0.180, 0.680]``; one run has no interval: ``0.430 (1 run)``."""
    if ci["n"] < 2:
        return f"{ci['value']:{sign}.3f} (1 run)"
    return f"{ci['value']:{sign}.3f} [{ci['low']:{sign}.3f}, {ci['high']:{sign}.3f}]"


def factor_effects(rows: list[RunRow], factors: list[tuple[str, list[str]]]) -> dict[str, list[dict]]:
    """Per factor and level: mean final success, best success and change over runs, with 95% CIs.

    Without factors (a sweep that only repeats one setting over seeds) the one entry ``"all runs"``
    summarises every finished run.
    """
    done = [r for r in rows if r.status == "finished"]

    def level(value: str, sel: list[RunRow]) -> dict:
        return {"value": value, "runs": len(sel),
                "final": mean_interval([r.final for r in sel]).to_dict(),
                "best": mean_interval([r.best for r in sel]).to_dict(),
                "change": mean_interval([r.change for r in sel]).to_dict(),
                "collapsed": sum(r.collapse != "-" for r in sel)}

    if not factors:
        return {"all runs": [level("all", done)] if done else []}
    out: dict[str, list[dict]] = {}
    for key, values in factors:
        out[key] = [level(v, sel) for v in values if (sel := [r for r in done if r.factors.get(key) == v])]
    return out


def _numeric(values: list[str]) -> list[float] | None:
    try:
        xs = [float(yaml.safe_load(v)) for v in values]
    except (TypeError, ValueError):
        return None
    return xs if all(math.isfinite(x) for x in xs) else None


def plot_sweep(out: Path, rows: list[RunRow], factors: list[tuple[str, list[str]]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs: list[Path] = []
    done = [r for r in rows if r.status == "finished"]
    if not done:
        return figs
    (out / "plots").mkdir(parents=True, exist_ok=True)
    # success vs the first numeric factor, one line per setting of the others
    num = [(k, vals, _numeric(vals)) for k, vals in factors]
    num = [(k, vals, xs) for k, vals, xs in num if xs is not None and len(vals) > 1]
    if num:
        key, vals, xs = num[0]
        others = [k for k, _ in factors if k != key]
        fig, ax = plt.subplots(figsize=(6.5, 4))
        groups: dict[str, list[RunRow]] = defaultdict(list)
        for r in done:
            groups[",".join(f"{k.split('.')[-1]}={r.factors[k]}" for k in others) or "all"].append(r)
        for label, sel in groups.items():
            px, py, lo, hi = [], [], [], []
            for v, x in zip(vals, xs):
                ys = [r.final for r in sel if r.factors[key] == v]
                if ys:
                    ci = mean_interval(ys)
                    one = len(ys) < 2  # no interval from one run
                    px.append(x); py.append(ci.value)
                    lo.append(0.0 if one else ci.value - ci.low); hi.append(0.0 if one else ci.high - ci.value)
                    ax.scatter([x] * len(ys), ys, s=10, alpha=0.4, color="gray")
            ax.errorbar(px, py, yerr=[lo, hi], marker="o", capsize=3, label=f"final, {label}")
        start = float(np.mean([r.start for r in done]))
        ax.axhline(start, ls="--", color="k", lw=1, label=f"before RL ({start:.3f})")
        if min(xs) > 0 and max(xs) / min(xs) >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel("held-out success (greedy)")
        ax.set_title(f"final success vs {key.split('.')[-1]} (mean, 95% CI over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / "plots" / f"success_vs_{key.split('.')[-1]}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        figs.append(p)
    # curves per run, coloured by setting
    fig, ax = plt.subplots(figsize=(7, 4))
    settings = list(dict.fromkeys(r.setting for r in done))
    cmap = plt.get_cmap("viridis", max(len(settings), 2))
    for r in done:
        i = settings.index(r.setting)
        ax.plot(r.eval_steps, r.eval_success, color=cmap(i), alpha=0.8, lw=1.2,
                ls="--" if r.collapse != "-" else "-",
                label=r.setting if r.seed == min(x.seed for x in done if x.setting == r.setting) else None)
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out success (greedy)")
    ax.set_title("learning curves per run (dashed: collapse detected)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "plots" / "curves.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    figs.append(p)
    return figs


def write_sweep_summary(out: str | Path, specs: list[RunSpec], factors: list[tuple[str, list[str]]],
                        *, sweep_info: dict[str, Any] | None = None, plots: bool = True) -> Path:
    """Write ``OUT/summary.md``, ``OUT/summary.json`` and ``OUT/plots/*.png``; returns the markdown path."""
    out = Path(out)
    rows = collect_runs(out, specs)
    effects = factor_effects(rows, factors)
    figs = plot_sweep(out, rows, factors) if plots else []
    info = sweep_info or {}
    lines = [f"# Sweep: {out.name}", ""]
    if info:
        lines += [f"- {k}: {v}" for k, v in info.items()] + [""]
    keys = [k for k, _ in factors]
    head = [k.split(".")[-1] for k in keys] + ["seed", "start", "final", "best", "change", "collapse", "train s"]
    lines += ["## Runs", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r.status != "finished":
            lines.append("| " + " | ".join([r.factors[k] for k in keys] + [str(r.seed)] + ["unfinished"] + [""] * 5) + " |")
            continue
        lines.append("| " + " | ".join([r.factors[k] for k in keys] + [
            str(r.seed), f"{r.start:.3f}", f"{r.final:.3f}", f"{r.best:.3f}", f"{r.change:+.3f}",
            r.collapse + (f" @{r.collapse_step}" if r.collapse_step is not None else ""), f"{r.seconds:.0f}"]) + " |")
    title = "Effects per factor" if factors else "Over seeds"
    lines += ["", f"## {title} (mean over runs, 95% t interval over runs)", ""]
    if not any(effects.values()):
        lines += ["No finished runs yet.", ""]
    for key, levels in ((k, lv) for k, lv in effects.items() if lv):
        lines += [f"### {key}", "", "| value | runs | final | best | change (final - start) | collapsed |",
                  "|---|---|---|---|---|---|"]
        for lv in levels:
            f, b, c = lv["final"], lv["best"], lv["change"]
            lines.append(f"| {lv['value']} | {lv['runs']} | {_cell(f)} | {_cell(b)} | {_cell(c, '+')} | "
                         f"{lv['collapsed']}/{lv['runs']} |")
        lines.append("")
    collapsed = [r for r in rows if r.collapse != "-"]
    if collapsed:
        lines += ["## Collapses", ""] + [f"- `{r.name}`: {r.collapse_reason}" for r in collapsed] + [""]
    lines += [f"![{p.stem}](plots/{p.name})" for p in figs]
    md = out / "summary.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    atomic_write_json(out / "summary.json", {"info": info, "runs": [r.to_dict() for r in rows],
                                             "effects": effects})
    return md
