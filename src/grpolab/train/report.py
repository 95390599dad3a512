"""End-of-run report: PNG plots and a short markdown summary in the run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpolab.train.metrics_log import read_metrics
from grpolab.utils.io import atomic_write_text

PLOTS = {
    "reward": ["reward/mean", "accuracy"],
    "eval_accuracy": ["eval/accuracy"],
    "lengths": ["length/mean", "length/correct", "length/incorrect"],
    "clip_fraction": ["update/clip_frac", "update/clip_frac_low", "update/clip_frac_high"],
    "entropy_kl": ["update/entropy", "update/approx_kl"],
    "credit": ["credit/lam", "credit/clip_frac", "credit/multiplier_min", "credit/multiplier_max"],
}


def plot_metrics(run_dir: str | Path, rows: list[dict[str, Any]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, keys in PLOTS.items():
        fig, ax = plt.subplots(figsize=(6, 3.5))
        drawn = False
        for k in keys:
            pts = [(r["step"], r[k]) for r in rows if r.get(k) is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, label=k)
                drawn = True
        if drawn:
            ax.set_xlabel("step")
            ax.set_title(name.replace("_", " "))
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{name}.png"
            fig.savefig(path, dpi=100)
            written.append(path)
        plt.close(fig)
    return written


def _credit_line(cfg) -> list[str]:
    """Which token-credit method ran (nothing for plain GRPO)."""
    c = cfg.credit
    if c.name == "grpo":
        return []
    lam = (f"lam {c.lam} -> {c.lam_end} over {c.lam_steps} steps" if c.lam_schedule == "linear"
           else f"lam {c.lam} (constant)")
    return [f"- credit: `{c.name}` ({lam}, eps_w {c.eps_w}, {c.teacher} teacher"
            f"{', negative rows only' if c.negative_only else ''}); plot: plots/credit.png"]


def _sandbox_line(run_dir: Path) -> list[str]:
    """The isolation the code sandbox had in this run (``sandbox.json``), as a summary line."""
    path = run_dir / "sandbox.json"
    if not path.exists():
        return []
    import json

    iso = json.loads(path.read_text())
    return [f"- {'**WARNING** ' if iso['degraded'] else ''}{iso['description']}"]


def write_report(run_dir: str | Path, cfg, result, *, plots: bool = True) -> Path:
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    figs = plot_metrics(run_dir, rows) if plots and rows else []
    o = cfg.objective
    last = rows[-1] if rows else {}
    lines = [
        f"# grpolab run: {run_dir.name}",
        "",
        f"- task: `{cfg.task.name}`, model: `{cfg.model.path or 'tiny (built-in)'}`",
        f"- objective: advantage `{o.advantage}`, ratio `{o.ratio}`, aggregation `{o.aggregation}`, "
        f"clip [{o.clip_low}, {o.clip_high}], KL {o.kl_coef} ({o.kl_estimator})",
        *_credit_line(cfg),
        f"- steps: {result.steps}, {cfg.rollout.prompts_per_step} prompts x {cfg.rollout.group_size} samples",
        f"- wall time: {result.seconds:.0f} s",
        *_sandbox_line(run_dir),
        "",
        "| held-out greedy accuracy | value |",
        "|---|---|",
        f"| before RL | {result.start_accuracy:.3f} |",
        f"| final | {result.final_accuracy:.3f} |",
        f"| best | {result.best_accuracy:.3f} |",
        f"| change | {result.final_accuracy - result.start_accuracy:+.3f} |",
        "",
    ]
    if last:
        lines += [
            f"Last step: reward {last.get('reward/mean', 0):.3f}, response length "
            f"{last.get('length/mean', 0):.1f}, step time {last.get('time/step', 0):.2f} s.",
            "",
        ]
    lines += [f"![{p.stem}](plots/{p.name})" for p in figs]
    path = run_dir / "summary.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
