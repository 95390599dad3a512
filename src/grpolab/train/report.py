"""End-of-run report: PNG plots, a short markdown summary and its JSON twin in the run directory.

``RUN_DIR/summary.md`` and ``RUN_DIR/summary.json`` hold the held-out greedy accuracy before RL
and at the end and, when the items carry a task family (``item.meta["family"]``, e.g. the
MiniWoB++ task name), a per-task table: success before and after RL, the number of held-out
episodes, and the preflight's GRPO verdict measured before training with the number of items it
rests on (``RUN_DIR/preflight.json``, written when ``trainer.preflight`` is on; runs from before
issue 43 have ``RUN_DIR/headroom.json`` instead, which is read the same way; see
docs/when-grpo-helps.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grpolab import step_row as K
from grpolab.train.metrics_log import read_metrics
from grpolab.train.watch import run_health
from grpolab.utils.io import atomic_write_json, atomic_write_text

PLOTS = {
    "reward": [K.REWARD_MEAN, K.ACCURACY],
    "eval_accuracy": [K.EVAL_ACCURACY],
    "lengths": [K.LENGTH_MEAN, K.LENGTH_CORRECT, K.LENGTH_INCORRECT],
    "clip_fraction": [K.UPDATE_CLIP_FRAC, K.UPDATE_CLIP_FRAC_LOW, K.UPDATE_CLIP_FRAC_HIGH],
    "entropy_kl": [K.UPDATE_ENTROPY, K.UPDATE_APPROX_KL],
    "credit": [K.CREDIT_LAM, K.CREDIT_CLIP_FRAC, K.CREDIT_MULTIPLIER_MIN, K.CREDIT_MULTIPLIER_MAX],
}


def plot_series(rows: list[dict[str, Any]], keys: list[str],
                start: dict[str, float] | None = None) -> list[tuple[str, list[tuple[int, float]]]]:
    """The ``(label, [(step, value), ...])`` lines of one plot: each key's logged points (``start``
    adds a step-0 point per key, e.g. the held-out accuracy before RL); keys whose points are
    identical (``reward/mean`` and ``accuracy`` under a 0/1 reward) are drawn once, labelled
    ``a = b``."""
    lines: list[tuple[str, list[tuple[int, float]]]] = []
    for k in keys:
        pts = [(int(r["step"]), float(r[k])) for r in rows if r.get(k) is not None]
        if start and k in start and pts:
            pts = [(0, float(start[k]))] + pts
        if not pts:
            continue
        same = next((i for i, (_, p) in enumerate(lines) if p == pts), None)
        if same is not None:
            lines[same] = (f"{lines[same][0]} = {k}", pts)
        else:
            lines.append((k, pts))
    return lines


def figure_caption(cfg, rows: list[dict[str, Any]], prompt_format: str | None = None) -> str:
    """The line under every figure of a run: what the curves come from, so a figure read alone
    still says it, e.g. ``model models/smollm2 · prompts: the tokenizer's chat template · peak
    memory: RSS 1612 MiB``. ``prompt_format``: the run's resolved format
    (:meth:`grpolab.tasks.PromptFormat.describe`); without it the configured one is named."""
    if prompt_format is None:
        t = cfg.task
        prompt_format = f"task.chat_template={t.chat_template}" + (
            f", prompt template {t.prompt_template[:40]!r}" if t.prompt_template != "{prompt}" else "")
    health = run_health(rows)
    memory = "not recorded" if health.peak_rss_mb is None else f"RSS {health.peak_rss_mb:.0f} MiB" + (
        f", CUDA {health.cuda_peak_mb:.0f} MiB" if health.cuda_peak_mb is not None else "")
    return (f"model {cfg.model.path or 'tiny (built-in)'} · task {cfg.task.name} · prompts: {prompt_format} "
            f"· peak memory: {memory}")


def plot_metrics(run_dir: str | Path, rows: list[dict[str, Any]],
                 start: dict[str, float] | None = None, caption: str | None = None) -> list[Path]:
    """PNG plots of :data:`PLOTS` in ``RUN_DIR/plots``; ``start``: step-0 values (``eval/accuracy``
    before RL) drawn as the first point; ``caption``: a line under each figure
    (:func:`figure_caption`: model, prompt format, peak memory). Steps are whole numbers on the x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir = Path(run_dir) / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, keys in PLOTS.items():
        lines = plot_series(rows, keys, start)
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(6, 3.5))
        for label, pts in lines:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o" if len(pts) < 30 else None, label=label)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(name.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        if caption:
            import textwrap

            text = "\n".join(textwrap.wrap(caption, 95))
            fig.text(0.01, 0.01, text, fontsize=6, color="0.3", ha="left", va="bottom")
            fig.tight_layout(rect=(0, 0.035 * (text.count("\n") + 1) + 0.01, 1, 1))
        else:
            fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        written.append(path)
        plt.close(fig)
    return written


def _credit_line(cfg) -> list[str]:
    """Which token-credit method ran (nothing for plain GRPO)."""
    c = cfg.credit
    if not c.enabled:
        return []
    lam = (f"lam {c.lam} -> {c.lam_end} over {c.lam_steps} steps" if c.lam_schedule == "linear"
           else f"lam {c.lam} (constant)")
    return [f"- credit: `{c.name}` ({lam}, eps_w {c.eps_w}, {c.teacher} teacher"
            f"{', negative rows only' if c.negative_only else ''}); plot: plots/credit.png"]


def _memory_line(health) -> list[str]:
    """Peak memory of the training process (and of the GPU) over the logged steps."""
    if health.peak_rss_mb is None:
        return []
    gpu = f", CUDA peak {health.cuda_peak_mb:.0f} MiB" if health.cuda_peak_mb is not None else ""
    return [f"- peak memory: RSS {health.peak_rss_mb:.0f} MiB{gpu}"]


def _dapo_line(cfg) -> list[str]:
    """DAPO's pieces when any is on (dynamic sampling, truncation masking, overlong shaping)."""
    r, o = cfg.rollout, cfg.objective
    parts = []
    if r.dynamic_sampling:
        parts.append(f"dynamic sampling (up to {r.dynamic_sampling_rounds} rounds)")
    if o.mask_truncated:
        parts.append("truncated responses masked")
    if o.overlong_buffer:
        parts.append(f"overlong buffer {o.overlong_buffer:g} (penalty {o.overlong_penalty:g})")
    return [f"- DAPO: {', '.join(parts)}"] if parts else []


def _sandbox_line(run_dir: Path) -> list[str]:
    """The isolation the code sandbox had in this run (``sandbox.json``), as a summary line."""
    path = run_dir / "sandbox.json"
    if not path.exists():
        return []
    import json

    iso = json.loads(path.read_text())
    return [f"- {'**WARNING** ' if iso['degraded'] else ''}{iso['description']}"]


def _read_headroom(run_dir: Path, name: str = "headroom.json") -> dict[str, Any] | None:
    path = run_dir / name
    if not path.exists():
        return None
    import json

    return json.loads(path.read_text())


def _preflight_family(fam: dict[str, Any], k: int | None) -> dict[str, Any]:
    """A preflight family (``preflight.json`` ``families``) in the row fields of a headroom family."""
    if not fam:
        return {}
    return {"verdict": fam.get("verdict"), "n_items": fam.get("n_items"), "greedy": fam.get("greedy"),
            "pass_at_k": {str(k): fam.get("pass_at_k")}, "k": k, "reachable": fam.get("reachable")}


def _headroom_family(fams: dict[str, Any], name: str) -> dict[str, Any]:
    """The headroom entry of family ``name``: keyed ``KIND=NAME`` by
    :func:`grpolab.diagnostics.family_of` (``family=click-button``, ``difficulty=3``), or
    plain ``NAME``."""
    if name in fams:
        return fams[name]
    for kind in ("family", "difficulty"):
        if f"{kind}={name}" in fams:
            return fams[f"{kind}={name}"]
    return next((v for k, v in fams.items() if k.split("=", 1)[-1] == name), {})


def per_task_rows(start: dict[str, dict], final: dict[str, dict],
                  headroom: dict[str, Any] | None = None,
                  preflight: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per task family: held-out greedy success before RL and at the end, episodes, and
    the family's verdict before training (``None`` where not measured).

    ``start`` / ``final``: ``{family: {"accuracy", "solved", "n"}}`` (``TrainResult.start_families``);
    ``preflight``: the parsed ``preflight.json`` (its GRPO verdict per family, with the items it rests
    on, is the row's ``headroom_verdict`` / ``headroom_items``; ``verdict_source`` "preflight");
    ``headroom``: a parsed ``headroom.json`` of an older run, used when there is no preflight. Both
    key their families ``KIND=NAME`` (``family=click-button``, ``difficulty=3``).
    """
    source = "preflight" if preflight is not None else ("headroom" if headroom is not None else None)
    fams = (preflight or headroom or {}).get("families", {})
    k = ((preflight or {}).get("stats") or {}).get("k")
    rows = []
    for name in sorted(dict.fromkeys([*start, *final]), key=_natural):  # difficulty 2, 3, 4 (not 3, 4, 2)
        b, a = start.get(name), final.get(name)
        h = _headroom_family(fams, name)
        if preflight is not None:
            h = _preflight_family(h, k)
        rows.append({
            "task": name,
            "kind": (a or b).get("kind"),  # what the name is: an item "family" or a "difficulty" level
            "n": (a or b)["n"],
            "before": b["accuracy"] if b else None,
            "after": a["accuracy"] if a else None,
            "change": a["accuracy"] - b["accuracy"] if a and b else None,
            "headroom_verdict": h.get("verdict"),
            "headroom_items": h.get("n_items"),
            "headroom_greedy": (h.get("greedy") or {}).get("value"),
            "headroom_sampled": (h.get("sampled") or {}).get("value"),
            "headroom_pass_at_k": ((h.get("pass_at_k") or {}).get(str(h.get("k"))) or {}).get("value"),
            "headroom_reachable": (h.get("reachable") or {}).get("value"),
            "verdict_source": source,  # what ran before RL, whether or not it measured this family
        })
    return rows


def _natural(name: str) -> tuple:
    """Sort key: numbers by value (``"10"`` after ``"9"``), then names."""
    return (0, int(name), "") if str(name).isdigit() else (1, 0, str(name))


def task_label(row: dict[str, Any]) -> str:
    """A per-task row's first cell: the family name, or ``difficulty 3`` for a difficulty level (a
    bare ``3`` said nothing; for arith it is the number of terms)."""
    kind = row.get("kind")
    return f"{kind} {row['task']}" if kind and kind != "family" else str(row["task"])


def per_task_markdown(rows: list[dict[str, Any]], k: int | None = None) -> list[str]:
    """The per-task table of ``summary.md`` (no lines when there are no rows)."""
    if not rows:
        return []
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    pk = f"pass@{k}" if k else "pass@k"
    if not any(r.get("verdict_source") == "headroom" for r in rows):  # a preflight, or nothing, ran before RL
        ran = any(r.get("verdict_source") == "preflight" for r in rows)
        lines = ["Per task: held-out greedy success before RL and at the end (on the run's held-out items), "
                 + ("and the preflight's GRPO verdict before RL ([preflight.md](preflight.md)), which rests on the "
                    "first held-out items of the task (their number in brackets; \"not measured\": none of the "
                    "items it measured) and on the share of them within reach (a sample solves it, or the answer is "
                    "already in a failed response)." if ran else
                    "with no verdict before RL: no preflight ran (trainer.preflight=false)."), "",
                 f"| task | held-out items | before RL | final | change | GRPO verdict before RL (items) | "
                 f"preflight greedy / {pk} / reachable |",
                 "|---|---|---|---|---|---|---|"]
        for r in rows:
            ch = "-" if r["change"] is None else f"{r['change']:+.3f}"
            v = (f"{r['headroom_verdict']} ({r['headroom_items']})" if r["headroom_verdict"] else "not measured")
            h = ("-" if r["headroom_greedy"] is None else
                 f"{f(r['headroom_greedy'])} / {f(r['headroom_pass_at_k'])} / {f(r['headroom_reachable'])}")
            lines.append(f"| {task_label(r)} | {r['n']} | {f(r['before'])} | {f(r['after'])} | {ch} | {v} | {h} |")
        return lines + [""]
    lines = ["Per task (held-out greedy success; headroom measured before RL on the first held-out items, by an "
             "older grpolab: headroom.json):", "",
             f"| task | held-out items | before RL | final | change | headroom verdict | headroom items | "
             f"greedy / sampled / {pk} |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ch = "-" if r["change"] is None else f"{r['change']:+.3f}"
        h = ("-" if r["headroom_greedy"] is None else
             f"{f(r['headroom_greedy'])} / {f(r['headroom_sampled'])} / {f(r['headroom_pass_at_k'])}")
        lines.append(f"| {task_label(r)} | {r['n']} | {f(r['before'])} | {f(r['after'])} | {ch} | "
                     f"{r['headroom_verdict'] or 'not measured'} | {r['headroom_items'] or '-'} | {h} |")
    return lines + [""]


def gains_line(result, n_eval: int | None = None) -> str:
    """The summary's first line: held-out greedy accuracy before RL and at the end, the change,
    the best, the steps and (when known) the number of held-out items it rests on."""
    change = result.final_accuracy - result.start_accuracy
    on = f", on {n_eval} held-out items" if n_eval else ""
    steps = f"{result.steps} step{'' if result.steps == 1 else 's'}"
    return (f"**Held-out greedy accuracy {result.start_accuracy:.3f} -> {result.final_accuracy:.3f} "
            f"({change:+.3f}; best {result.best_accuracy:.3f}) after {steps}{on}.**")


def write_report(run_dir: str | Path, cfg, result, *, plots: bool = True, prompt_format: str | None = None) -> Path:
    """``RUN_DIR/summary.md`` + ``summary.json`` (and the plots unless ``plots=False``).
    ``prompt_format``: the run's resolved prompt format in words (figures and summary name it)."""
    run_dir = Path(run_dir)
    rows = read_metrics(run_dir)
    caption = figure_caption(cfg, rows, prompt_format)
    figs = (plot_metrics(run_dir, rows, start={K.EVAL_ACCURACY: result.start_accuracy}, caption=caption)
            if plots and rows else [])
    o = cfg.objective
    last = rows[-1] if rows else {}
    health = run_health(rows, truncated_frac=cfg.log.warn_truncated_frac, early_steps=cfg.log.warn_no_signal_steps)
    headline, note = health.headline(), health.note()
    n_eval = getattr(result, "n_eval", 0) or None
    lines = [
        f"# grpolab run: {run_dir.name}",
        "",
        gains_line(result, n_eval),  # what the run gained first, then what went wrong
        "",
        *([headline, ""] if headline else []),
        *([note, ""] if note else []),
        f"- task: `{cfg.task.name}`, model: `{cfg.model.path or 'tiny (built-in)'}`",
        *([f"- prompts: {prompt_format}"] if prompt_format else []),
        f"- objective: advantage `{o.advantage}`, ratio `{o.ratio}`, aggregation `{o.aggregation}`, "
        f"clip [{o.clip_low}, {o.clip_high}], KL {o.kl_coef} ({o.kl_estimator})",
        *_credit_line(cfg),
        f"- steps: {result.steps}, {cfg.rollout.prompts_per_step} prompts x {cfg.rollout.group_size} samples",
        f"- wall time: {result.seconds:.0f} s",
        *_memory_line(health),
        *_dapo_line(cfg),
        *_sandbox_line(run_dir),
        "",
        f"| held-out greedy accuracy{f' ({n_eval} items)' if n_eval else ''} | value |",
        "|---|---|",
        f"| before RL | {result.start_accuracy:.3f} |",
        f"| final | {result.final_accuracy:.3f} |",
        f"| best | {result.best_accuracy:.3f} |",
        f"| change | {result.final_accuracy - result.start_accuracy:+.3f} |",
        "",
    ]
    preflight = _read_headroom(run_dir, "preflight.json")
    headroom = None if preflight is not None else _read_headroom(run_dir)
    tasks = per_task_rows(getattr(result, "start_families", {}) or {}, getattr(result, "final_families", {}) or {},
                          headroom, preflight)
    if preflight is not None:
        st = preflight.get("stats", {})
        n = st.get("n_items")
        lines += [f"Preflight before RL ([preflight.md](preflight.md), {n} held-out item{'' if n == 1 else 's'} x "
                  f"{st.get('k')} samples): **GRPO {preflight.get('verdict')}** -- "
                  + "; ".join(f"{m['method']}: {m['verdict']}" for m in preflight.get("methods", [])[1:]), ""]
    k = ((preflight or {}).get("stats") or {}).get("k") or (headroom or {}).get("overall", {}).get("k")
    lines += per_task_markdown(tasks, k=k)
    if last:
        lines += [
            f"Last step: reward {last.get(K.REWARD_MEAN, 0):.3f}, response length "
            f"{last.get(K.LENGTH_MEAN, 0):.1f}, step time {last.get(K.TIME_STEP, 0):.2f} s.",
            "",
        ]
    lines += [f"![{p.stem}](plots/{p.name})" for p in figs]
    atomic_write_json(run_dir / "summary.json", {
        "run": run_dir.name, "task": cfg.task.name, "model": cfg.model.path or "tiny (built-in)",
        "steps": result.steps, "seconds": result.seconds, "prompt_format": prompt_format, "figure_caption": caption,
        "accuracy": {"before_rl": result.start_accuracy, "final": result.final_accuracy,
                     "best": result.best_accuracy, "change": result.final_accuracy - result.start_accuracy},
        "headroom_verdict": (preflight or headroom or {}).get("verdict"),
        "preflight_verdict": (preflight or {}).get("verdict"),
        "preflight_items": ((preflight or {}).get("stats") or {}).get("n_items"),
        "health": health.to_dict(),
        "per_task": tasks,
    })
    path = run_dir / "summary.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
