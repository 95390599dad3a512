"""The credit page of a run: where does the privileged teacher put the blame?

The library behind ``grpolab credit RUN_DIR --sample N`` (:mod:`grpolab.commands.credit` is its
glue). It sits above the trainer, beside :mod:`grpolab.runs`: it runs the trainer's credit step
(:class:`grpolab.train.credit.CreditStep`) on a run directory (:class:`grpolab.train.rundir.RunDir`),
so it cannot live in :mod:`grpolab.measure`, which never imports :mod:`grpolab.train`.

Opens a run with :func:`grpolab.runs.open_run` (its model: ``final/``, else the newest checkpoint,
else the warm start; its config, prompt format, stop tokens and collector), samples ``group_size`` responses for a few held-out prompts, scores them (rewards, group
advantages), runs the run's credit method (``rlsd``/``gear``/``opsd``; ``gear`` for a ``grpo`` run)
with the teacher the run used (the frozen teacher saved in the newest checkpoint, else the model
itself), and writes

- ``RUN_DIR/credit/credit.html``: each response token on a background coloured by its credit
  multiplier ``A_t / A`` (red: more weight than the sequence advantage, blue: less; white: 1),
  GEAR segments outlined, details (delta, KL, segment) on hover. OPSD has no sequence advantage
  (its multiplier is 1 everywhere): its tokens are coloured by what it trains on, the per-token
  advantage ``A_t = teacher - student`` log-prob (:func:`opsd_scale`; red: pushed down, blue:
  pushed up);
- ``RUN_DIR/credit/credit.png``: the same picture, one row per response.

``lam`` defaults to the value the run's schedule reached at its last trained step (the weight the
teacher really had at the end of training); ``--lam 1`` shows the full teacher weight. The page
header names both.
"""

from __future__ import annotations

import dataclasses
import html
import os
from pathlib import Path
from typing import Any

import torch

from grpolab.utils.io import atomic_write_text


def collect(run_dir: str | Path, *, sample: int = 4, lam: float | None = None, method: str | None = None,
            seed: int = 0, log=print) -> dict[str, Any]:
    """Sample, score and reweight ``sample`` responses of a run; returns what the page shows."""
    from grpolab import objectives as obj
    from grpolab.config import ConfigError
    from grpolab.runs import open_run
    from grpolab.train.credit import CreditStep
    from grpolab.train.rundir import RunDir, RunDirError

    if sample < 1:
        raise ConfigError(f"--sample must be >= 1, got {sample}")
    run = RunDir(run_dir)
    if not run.is_run():
        raise RunDirError(f"{run_dir} is not a grpolab run directory (no config.yaml there)")
    opened = open_run(run_dir, log=log)
    cfg, model, tok, eval_items = opened.config, opened.model, opened.tokenizer, opened.eval_items
    if opened.env is not None:
        raise ConfigError(f"{run_dir} plays multi-turn episodes (env.name={cfg.env.name!r}); the credit page "
                          "shows single-turn responses under the teacher template, which episodes do not have")
    method = method or (cfg.credit.name if cfg.credit.enabled else "gear")
    obj.CREDIT_METHODS.get(method)
    cfg = dataclasses.replace(cfg, credit=dataclasses.replace(cfg.credit, name=method))  # the run's config stays as read
    G = max(cfg.rollout.group_size, 2)
    n_prompts = min(len(eval_items), max(1, -(-sample // G) * 2))   # extra prompts: want mixed rewards
    exp = opened.collector.collect(
        model, eval_items[:n_prompts], group_size=G, temperature=cfg.rollout.temperature,
        top_p=cfg.rollout.top_p, generator=torch.Generator().manual_seed(seed))
    rollout, completions, rewards = exp.rollout, exp.texts, exp.rewards
    adv = obj.get_advantage_estimator(cfg.objective.advantage)(rewards, rollout.group_ids)
    exp = exp.replace(advantages=adv)
    step = CreditStep.from_config(cfg, model, tok, opened.prompt_format)
    ckpt = run.latest_checkpoint()
    saved = ckpt.load_state() if ckpt is not None else {}
    if step.teacher is not None and saved.get("credit") is not None:
        step.load_state_dict(saved["credit"])
    last_step = int(saved.get("step", 0))
    c = cfg.credit
    schedule = (f"{c.lam} -> {c.lam_end} over {c.lam_steps} steps" if c.lam_schedule == "linear"
                else f"constant {c.lam}")
    if lam is None:
        # the schedule's step argument is 0-based: the last trained step is step - 1
        lam = step.lam(max(last_step - 1, 0))
        lam_note = f"the value training reached at its last step ({last_step}; schedule {schedule})"
    else:
        lam_note = f"set by --lam (training's schedule: {schedule})"
    out = step(0, model, exp, lam=lam)
    row_items = exp.row_items
    # rows to show: non-zero advantages first (both signs), then the rest
    order = sorted(range(len(completions)), key=lambda i: (adv[i] == 0, -abs(float(adv[i])), i))[:sample]
    rows = []
    for i in order:
        n = int(rollout.response_mask[i].sum())
        ids = rollout.response_ids[i, :n].tolist()
        rows.append({
            "prompt": row_items[i].prompt, "completion": completions[i], "reward": float(rewards[i]),
            "advantage": float(adv[i]),
            "tokens": [tok.decode([t]) for t in ids],
            "multiplier": out.multiplier[i, :n].tolist(),
            "token_advantage": out.advantages[i, :n].tolist(),
            "delta": (out.teacher_logp[i, :n] - out.student_logp[i, :n]).tolist(),
            "kl": None if out.divergence is None else out.divergence[i, :n].tolist(),
            "segment": None if out.segment_ids is None else out.segment_ids[i, :n].tolist(),
        })
    return {"method": method, "lam": lam, "lam_note": lam_note, "eps_w": cfg.credit.eps_w, "teacher": cfg.credit.teacher,
            "template": cfg.credit.template, "rows": rows, "metrics": out.metrics}


def _color(mult: float, eps: float) -> tuple[float, float, float]:
    """White at 1; red towards 1 + eps, blue towards 1 - eps (RGB in [0, 1])."""
    x = 0.0 if eps <= 0 else max(-1.0, min(1.0, (mult - 1.0) / eps))
    if x >= 0:
        return (1.0, 1.0 - 0.75 * x, 1.0 - 0.75 * x)
    return (1.0 + 0.75 * x, 1.0 + 0.75 * x, 1.0)


def opsd_scale(rows: list[dict[str, Any]]) -> float:
    """The ``|A_t|`` (nats) at which an OPSD page saturates: the 95th percentile of the shown tokens'
    ``|teacher - student|``, at least 0.1 (so a page of near-zero gaps stays near white)."""
    vals = sorted(abs(v) for r in rows for v in (r.get("token_advantage") or r["delta"]))
    if not vals:
        return 0.1
    return max(0.1, vals[min(len(vals) - 1, int(0.95 * (len(vals) - 1) + 0.5))])


def _token_colour(data: dict[str, Any], r: dict[str, Any], j: int, eps: float, scale: float):
    """``(rgb, value shown)`` of token ``j``: the multiplier ``A_t / A``, or for OPSD ``A_t`` itself
    (negative: red like extra blame, positive: blue), saturated at ``+-scale``."""
    if data["method"] == "opsd":
        a = (r.get("token_advantage") or r["delta"])[j]
        return _color(1.0 - a / scale, 1.0), a
    m = r["multiplier"][j]
    return _color(m, eps), m


def _show(tokstr: str) -> str:
    return tokstr.replace("\n", "\u21b5").replace(" ", "\u00b7") or "\u2205"


def render_html(data: dict[str, Any]) -> str:
    eps = data["eps_w"] * data["lam"] or 1e-9
    opsd = data["method"] == "opsd"
    scale = opsd_scale(data["rows"]) if opsd else 1.0
    background = (
        "Background: OPSD's per-token advantage A_t = teacher - student log-prob of the token (no reward, "
        f"no sequence advantage): red = pushed down (the teacher finds the token less likely), white = 0, "
        f"blue = pushed up, saturated at &plusmn;{scale:.3g} nats (95th percentile of |A_t| on this page). "
        if opsd else
        "Background: the multiplier A_t / A (red &gt; 1, white = 1, blue &lt; 1, saturated at "
        f"1 &plusmn; lam eps_w = 1 &plusmn; {eps:.3g}). ")
    parts = [
        "<!doctype html><meta charset='utf-8'><title>grpolab credit</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        ".tok{font-family:monospace;font-size:15px;padding:2px 1px;margin:0;display:inline-block}"
        ".seg{outline:2px solid #222;outline-offset:-1px}.anc{font-weight:bold;text-decoration:underline}"
        ".row{margin:1.2em 0;padding:.6em;border:1px solid #ddd}.meta{color:#555;font-size:13px}</style>",
        f"<h1>Token credit: {html.escape(data['method'])}</h1>",
        f"<p class=meta>lam = {data['lam']:.4g} ({html.escape(data.get('lam_note', ''))}), "
        f"eps_w = {data['eps_w']}, teacher = {html.escape(data['teacher'])}. "
        + background
        + ("Outlined: a GEAR segment (its first token, the anchor, is underlined). "
           if data["method"] == "gear" else "")
        + "Hover a token for details.</p>",
    ]
    for r in data["rows"]:
        parts.append("<div class=row>")
        parts.append(f"<div class=meta>prompt <code>{html.escape(r['prompt'])}</code> &middot; reward {r['reward']:.2f} "
                     f"&middot; A = {r['advantage']:+.3f}</div><div>")
        prev_seg = 0
        for j, t in enumerate(r["tokens"]):
            m = r["multiplier"][j]
            rgb, _ = _token_colour(data, r, j, eps, scale)
            seg = r["segment"][j] if r["segment"] else 0
            cls = "tok" + (" seg" if seg else "") + (" anc" if seg and seg != prev_seg else "")
            prev_seg = seg
            tip = (f"A_t {(r.get('token_advantage') or r['delta'])[j]:+.4f}" if opsd else f"mult {m:.4f}")
            tip += f", delta {r['delta'][j]:+.3f}"
            if r["kl"] is not None:
                tip += f", KL {r['kl'][j]:.3f}"
            if seg:
                tip += f", segment {seg}"
            bg = "#%02x%02x%02x" % tuple(int(255 * c) for c in rgb)
            parts.append(f"<span class='{cls}' style='background:{bg}' title='{html.escape(tip)}'>"
                         f"{html.escape(_show(t))}</span>")
        parts.append("</div></div>")
    return "".join(parts) + "\n"


def render_png(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    eps = data["eps_w"] * data["lam"] or 1e-9
    rows = data["rows"]
    opsd = data["method"] == "opsd"
    scale = opsd_scale(rows) if opsd else 1.0
    width = max((len(r["tokens"]) for r in rows), default=1)
    fig, ax = plt.subplots(figsize=(min(0.28 * width + 2.5, 40), 0.55 * len(rows) + 1))
    for y, r in enumerate(rows):
        yy = len(rows) - 1 - y
        ax.text(-0.5, yy + 0.4, f"A={r['advantage']:+.2f}", ha="right", va="center", fontsize=8)
        for j, t in enumerate(r["tokens"]):
            rgb, value = _token_colour(data, r, j, eps, scale)
            ax.add_patch(Rectangle((j, yy), 1, 0.8, facecolor=rgb, edgecolor="none"))
            ax.text(j + 0.5, yy + 0.52, _show(t)[:3], ha="center", va="center", fontsize=8, family="monospace")
            ax.text(j + 0.5, yy + 0.17, f"{value:+.2f}" if opsd else f"{value:.2f}", ha="center", va="center",
                    fontsize=5)
        if r["segment"]:
            seg = r["segment"]
            j = 0
            while j < len(seg):
                if seg[j]:
                    k = j
                    while k + 1 < len(seg) and seg[k + 1] == seg[j]:
                        k += 1
                    ax.add_patch(Rectangle((j, yy), k - j + 1, 0.8, fill=False, edgecolor="black", linewidth=1.5))
                    j = k + 1
                else:
                    j += 1
    ax.set_xlim(-3, width)
    ax.set_ylim(-0.2, len(rows))
    ax.axis("off")
    outlined = ", GEAR segments outlined" if data["method"] == "gear" else ""
    if opsd:
        ax.set_title(f"opsd: per-token advantage A_t = teacher - student log-prob (number under each token; "
                     f"saturated at +-{scale:.3g})", fontsize=10)
    else:
        ax.set_title(f"{data['method']}: token multiplier A_t/A (number under each token; lam = {data['lam']:.3g})"
                     f"{outlined}", fontsize=10)
    from matplotlib.colors import LinearSegmentedColormap, Normalize
    from matplotlib.cm import ScalarMappable

    if opsd:  # A_t from -scale (red) to +scale (blue)
        cmap = LinearSegmentedColormap.from_list("credit", [_color(2.0, 1.0), (1, 1, 1), _color(0.0, 1.0)])
        bar = fig.colorbar(ScalarMappable(norm=Normalize(-scale, scale), cmap=cmap), ax=ax, fraction=0.02, pad=0.01)
        bar.set_label("A_t (nats)", fontsize=8)
    else:
        cmap = LinearSegmentedColormap.from_list("credit", [_color(1 - eps, eps), (1, 1, 1), _color(1 + eps, eps)])
        bar = fig.colorbar(ScalarMappable(norm=Normalize(1 - eps, 1 + eps), cmap=cmap), ax=ax, fraction=0.02,
                           pad=0.01)
        bar.set_label("A_t / A", fontsize=8)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    os.replace(tmp, path)


def credit_page(run_dir: str | Path, *, sample: int = 4, lam: float | None = None, method: str | None = None,
                seed: int = 0, out_dir: str | Path | None = None, png: bool = True, log=print) -> Path:
    """Write ``credit.html`` (and ``credit.png``) for a run; returns the HTML path."""
    from grpolab.train.checks import check_writable

    out = Path(out_dir) if out_dir is not None else Path(run_dir) / "credit"
    check_writable(out, "the credit page's folder (--out)", directory=True)  # before the model work
    data = collect(run_dir, sample=sample, lam=lam, method=method, seed=seed, log=log)
    out.mkdir(parents=True, exist_ok=True)
    page = out / "credit.html"
    atomic_write_text(page, render_html(data))
    if png:
        render_png(data, out / "credit.png")
    return page


__all__ = ["collect", "credit_page", "opsd_scale", "render_html", "render_png"]
