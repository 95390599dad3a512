"""``grpolab compare``: variants x seeds, compared by :mod:`grpolab.diagnostics.inference` and the
statistics that explain them (docs/statistics.md).

For each variant (a setting of the ``--vary`` factors) over its seeds:

* final and best held-out success, mean with a 95% t interval over seeds;
* the paired difference to the baseline variant, paired by seed (same seed = same data order,
  same initial sampling stream): t interval, exact sign-flip p-value below 20 seeds, Holm's
  correction across the variants, the minimum detectable effect and a verdict
  (:func:`~grpolab.diagnostics.inference.compare_family`); the final success is the primary endpoint;
* learning curves (mean over seeds, band = 95% t interval over seeds at each evaluation);
* training statistics averaged over steps, then over seeds, that explain a difference:
  aggregation -- response-length spread (``length/std``), the incorrect-minus-correct length
  gap, and right vs wrong lengths within mixed groups (``length/mixed_*``); ratios -- clip fraction (overall and by position bucket) and ratio spread
  (``ratio_max - ratio_min``); credit -- the ``credit/*`` metrics, among them the spread of the
  per-token credit multipliers (``multiplier_max - multiplier_min``); plus entropy and KL.

Writes ``OUT/comparison.md``, ``OUT/comparison.json`` and ``OUT/plots/compare_*.png``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from grpolab import step_row as K
from grpolab.diagnostics import compare_family, mean_interval
from grpolab.sweep.grid import RunSpec
from grpolab.sweep.summary import RunRow, collect_runs
from grpolab.train.metrics_log import read_metrics
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["EXPLAIN_KEYS", "pick_baseline", "training_statistics", "write_comparison"]

#: Derived here from two step-row keys (not in metrics.jsonl): max - min of the step's ratio / multiplier.
RATIO_SPREAD = "update/ratio_spread"
MULTIPLIER_SPREAD = "credit/multiplier_spread"

#: Metrics that explain differences between objectives (averaged over steps), in report order.
EXPLAIN_KEYS: tuple[str, ...] = (
    K.LENGTH_MEAN, K.LENGTH_STD, K.LENGTH_GAP, K.LENGTH_MIXED_CORRECT,
    K.LENGTH_MIXED_INCORRECT, K.LENGTH_MIXED_RATIO, K.UPDATE_CLIP_FRAC,
    K.UPDATE_CLIP_FRAC_LOW, K.UPDATE_CLIP_FRAC_HIGH, RATIO_SPREAD, K.UPDATE_APPROX_KL,
    K.UPDATE_ENTROPY, K.GROUPS_ALL_EQUAL_FRAC,
)
_EXTRA_PREFIXES = ("update/clip_frac_by_pos/", "credit/")
_EXTRA_WORDS = ("weight", "credit")


def training_statistics(rows: list[dict[str, Any]], *, skip_first: float = 0.0) -> dict[str, float]:
    """Mean over steps of the explanatory metrics of one run (``skip_first``: fraction of steps dropped)."""
    rows = rows[int(len(rows) * skip_first):]
    acc: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        vals = dict(r)
        if r.get(K.UPDATE_RATIO_MAX) is not None and r.get(K.UPDATE_RATIO_MIN) is not None:
            vals[RATIO_SPREAD] = r[K.UPDATE_RATIO_MAX] - r[K.UPDATE_RATIO_MIN]
        if r.get(K.CREDIT_MULTIPLIER_MAX) is not None and r.get(K.CREDIT_MULTIPLIER_MIN) is not None:
            vals[MULTIPLIER_SPREAD] = r[K.CREDIT_MULTIPLIER_MAX] - r[K.CREDIT_MULTIPLIER_MIN]
        for k, v in vals.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            if k in EXPLAIN_KEYS or k.startswith(_EXTRA_PREFIXES) or (
                    k.startswith("update/") and any(w in k for w in _EXTRA_WORDS)):
                acc[k].append(float(v))
    return {k: float(np.mean(v)) for k, v in acc.items() if v}


def pick_baseline(settings: list[str], specs: list[RunSpec], baseline: str | None) -> str:
    """The setting named by ``baseline``: a setting name, ``key=value[,...]`` or a bare value."""
    if baseline is None:
        return settings[0]
    if baseline in settings:
        return baseline
    by_setting = {s.setting: s for s in specs}
    hits = []
    for name in settings:
        f = by_setting[name].factors
        if "=" in baseline:
            want = dict(kv.split("=", 1) for kv in baseline.split(","))
            ok = all(any(k == key or k.split(".")[-1] == key for k in f) and
                     [v for k, v in f.items() if k == key or k.split(".")[-1] == key][0] == val
                     for key, val in want.items())
        else:
            ok = baseline in f.values()
        if ok:
            hits.append(name)
    if len(hits) != 1:
        raise ValueError(f"--baseline {baseline!r} matches {len(hits)} variants ({hits}); variants are: "
                         f"{settings}; pass one of them exactly")
    return hits[0]


def _band(curves: list[tuple[list[int], list[float]]]):
    steps = sorted(set.intersection(*[set(s) for s, _ in curves])) if curves else []
    mean, lo, hi = [], [], []
    for st in steps:
        ys = [y[s.index(st)] for s, y in curves]
        ci = mean_interval(ys)
        mean.append(ci.value); lo.append(ci.low); hi.append(ci.high)
    return steps, mean, lo, hi


def _plots(out: Path, variants: dict[str, list[RunRow]], stats_curves: dict[str, dict[str, list]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (out / "plots").mkdir(parents=True, exist_ok=True)
    figs = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, runs in variants.items():
        steps, mean, lo, hi = _band([(r.eval_steps, r.eval_success) for r in runs])
        if steps:
            line, = ax.plot(steps, mean, label=f"{name} (n={len(runs)})")
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("RL step"); ax.set_ylabel("held-out success (greedy)")
    ax.set_title("learning curves: mean over seeds, band = 95% t interval")
    ax.grid(alpha=0.3); ax.legend(fontsize=7); fig.tight_layout()
    p = out / "plots" / "compare_curves.png"; fig.savefig(p, dpi=110); plt.close(fig); figs.append(p)

    keys = [k for k in (K.LENGTH_STD, K.LENGTH_GAP, K.UPDATE_CLIP_FRAC,
                        RATIO_SPREAD, K.UPDATE_ENTROPY, K.LENGTH_MEAN)
            if any(k in c for c in stats_curves.values())]
    if keys:
        fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 3.2), squeeze=False)
        for ax, k in zip(axes[0], keys):
            for name, curves in stats_curves.items():
                if k in curves and curves[k][0]:
                    xs, ys = curves[k]
                    w = max(1, len(ys) // 20)
                    sm = np.convolve(ys, np.ones(w) / w, mode="valid")
                    ax.plot(xs[w - 1:], sm, label=name, lw=1.2)
            ax.set_title(k, fontsize=8); ax.set_xlabel("step", fontsize=8); ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
        axes[0][0].legend(fontsize=6)
        fig.tight_layout()
        p = out / "plots" / "compare_stats.png"; fig.savefig(p, dpi=110); plt.close(fig); figs.append(p)
    return figs


def _paired_to_baseline(entries: dict[str, dict], variants: dict[str, list[RunRow]], base: str) -> None:
    """Each variant's final and best minus the baseline's, paired by seed, Holm-corrected across the
    variants (one family per endpoint); one shared seed gives the difference alone."""
    b_by_seed = {r.seed: r for r in variants[base]}
    for key in ("final", "best"):
        fam, single = {}, {}
        for name, runs in variants.items():
            pairs = [(r, b_by_seed[r.seed]) for r in runs if r.seed in b_by_seed] if name != base else []
            if len(pairs) >= 2:
                fam[name] = ([getattr(a, key) for a, _ in pairs], [getattr(b, key) for _, b in pairs])
            elif pairs:
                single[name] = {"value": getattr(pairs[0][0], key) - getattr(pairs[0][1], key), "n": 1}
        for name, c in compare_family(fam).items():
            entries[name][f"{key}_minus_baseline"] = {**c.to_dict(), "summary": c.summary(what=f"{name} - {base}")}
        for name, d in single.items():
            entries[name][f"{key}_minus_baseline"] = d


def write_comparison(out: str | Path, specs: list[RunSpec], factors: list[tuple[str, list[str]]], *,
                     baseline: str | None = None, info: dict[str, Any] | None = None,
                     plots: bool = True) -> Path:
    out = Path(out)
    rows = [r for r in collect_runs(out, specs) if r.status == "finished"]
    if not rows:
        raise ValueError(f"no finished runs in {out}; run the comparison first")
    settings = list(dict.fromkeys(s.setting for s in specs))
    variants: dict[str, list[RunRow]] = {s: [r for r in rows if r.setting == s] for s in settings}
    variants = {k: v for k, v in variants.items() if v}
    base = pick_baseline(list(variants), specs, baseline)
    result: dict[str, Any] = {"info": info or {}, "baseline": base, "variants": {}}
    stats_curves: dict[str, dict[str, list]] = {}
    for name, runs in variants.items():
        per_run_stats = []
        curves: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
        for r in runs:
            metrics = read_metrics(out / "runs" / r.name)
            per_run_stats.append(training_statistics(metrics))
            for m in metrics:
                if m.get(K.UPDATE_RATIO_MAX) is not None and m.get(K.UPDATE_RATIO_MIN) is not None:
                    m = {**m, RATIO_SPREAD: m[K.UPDATE_RATIO_MAX] - m[K.UPDATE_RATIO_MIN]}
                for k, v in m.items():
                    if isinstance(v, (int, float)) and not isinstance(v, bool):
                        curves[k][int(m["step"])].append(float(v))
        stats_curves[name] = {k: (sorted(d), [float(np.mean(d[s])) for s in sorted(d)]) for k, d in curves.items()}
        keys = sorted(set().union(*per_run_stats)) if per_run_stats else []
        entry = {
            "runs": [r.name for r in runs], "seeds": [r.seed for r in runs],
            "start": mean_interval([r.start for r in runs]).to_dict(),
            "final": mean_interval([r.final for r in runs]).to_dict(),
            "best": mean_interval([r.best for r in runs]).to_dict(),
            "collapsed": sum(r.collapse != "-" for r in runs),
            "statistics": {k: mean_interval([s[k] for s in per_run_stats if k in s]).to_dict() for k in keys},
        }
        result["variants"][name] = entry
    _paired_to_baseline(result["variants"], variants, base)
    figs = _plots(out, variants, stats_curves) if plots else []

    def f(ci, signed=False):
        s = "+" if signed else ""
        if "low" not in ci:
            return f"{ci['value']:{s}.3f} (1 seed)"
        return f"{ci['value']:{s}.3f} [{ci['low']:{s}.3f}, {ci['high']:{s}.3f}]"

    def verdict(ci):
        return f"{ci['verdict']} (p {ci['adjusted_p']:.2g})" if "verdict" in ci else "-"

    lines = [f"# Comparison: {out.name}", ""]
    lines += [f"- {k}: {v}" for k, v in (info or {}).items()]
    lines += [f"- baseline: `{base}`; intervals: 95% t over seeds; differences paired by seed, tested by "
              "the t test and (below 20 seeds) the exact sign-flip test, both below 0.05 to call a difference "
              "significant, Holm-corrected across the variants (p shown is the adjusted one; docs/statistics.md)",
              "", "| variant | seeds | before RL | final | best | final - baseline | verdict (final) | best - baseline "
              "| collapsed |", "|---|---|---|---|---|---|---|---|---|"]
    for name, e in result["variants"].items():
        d1 = f(e["final_minus_baseline"], True) if "final_minus_baseline" in e else "(baseline)"
        d2 = f(e["best_minus_baseline"], True) if "best_minus_baseline" in e else ""
        v1 = verdict(e["final_minus_baseline"]) if "final_minus_baseline" in e else ""
        lines.append(f"| {name} | {len(e['seeds'])} | {e['start']['value']:.3f} | {f(e['final'])} | "
                     f"{f(e['best'])} | {d1} | {v1} | {d2} | {e['collapsed']}/{len(e['seeds'])} |")
    lines += [""] + [f"- {e['final_minus_baseline']['summary']}" for e in result["variants"].values()
                     if "summary" in e.get("final_minus_baseline", {})]
    all_keys = [k for k in EXPLAIN_KEYS if any(k in e["statistics"] for e in result["variants"].values())]
    all_keys += sorted({k for e in result["variants"].values() for k in e["statistics"]} - set(all_keys))
    lines += ["", "## Training statistics (mean over steps, then over seeds; 95% t interval over seeds)", "",
              "| statistic | " + " | ".join(result["variants"]) + " |", "|---|" + "---|" * len(result["variants"])]
    for k in all_keys:
        cells = []
        for e in result["variants"].values():
            ci = e["statistics"].get(k)
            cells.append(f"{ci['value']:.4g} [{ci['low']:.4g}, {ci['high']:.4g}]" if ci else "")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    lines += [""] + [f"![{p.stem}](plots/{p.name})" for p in figs]
    md = out / "comparison.md"
    atomic_write_text(md, "\n".join(lines) + "\n")
    atomic_write_json(out / "comparison.json", result)
    return md
