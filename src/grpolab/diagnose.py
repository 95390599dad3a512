"""The revert/transplant study of a run: what did RL change, and where does the change live?

The library behind ``grpolab diagnose RUN_DIR`` (:mod:`grpolab.commands.diagnose` is its glue).
It sits above the trainer, beside :mod:`grpolab.runs`: it reads a run directory
(:class:`grpolab.train.rundir.RunDir`) and encodes its probe prompts as the warm start does
(:func:`grpolab.train.sft.sft_batch`), so it cannot live in :mod:`grpolab.measure`, which never
imports :mod:`grpolab.train`.

The run is opened with :func:`grpolab.runs.open_run`, so every ablation is measured with the
run's prompt format, stop tokens and collector (episodes for multi-turn runs), as in training.

Compares a run's trained model with its starting point (the cached warm start ``RUN_DIR/sft``,
else ``model.path``, else ``--base``):

1. drift per parameter group and per layer (:func:`grpolab.diagnostics.parameter_drift`);
2. causal localisation: held-out greedy success of the trained model with each group *reverted*
   to base weights, and of the base model with each group *transplanted* from the trained one,
   with 95% t intervals over items (the weights are restored exactly after each ablation); the
   five kinds, plus attention+MLP together (the study's localisation of a degraded agent);
3. effective ranks (Roy & Vetterli) of every weight matrix (base, trained, and the update
   ``W - W0``) and of each layer's hidden states over a probe set of held-out problems;
4. ``RUN_DIR/diagnose.md``, ``diagnose.json`` and ``plots/diagnose_*.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpolab.diagnostics import (
    effective_rank,
    hidden_state_effective_ranks,
    mean_interval,
    parameter_drift,
    parameter_state,
    swapped,
)
from grpolab.models import GROUP_KINDS, load_model, parameter_groups
from grpolab.measure.evaluate import SOLVED, evaluate
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["diagnose_run", "resolve_models"]


def resolve_models(run_dir: Path, base: str | None) -> tuple[Path, Path]:
    """``(trained_dir, base_dir)`` of a run (see the module docstring)."""
    from grpolab.train.rundir import RunDir, RunDirError

    run = RunDir(run_dir)
    if not run.is_run():
        raise RunDirError(f"{run_dir} is not a grpolab run directory (no config.yaml)")
    trained = run.model_dir(warm_start=False)
    if base is not None:
        base_dir = Path(base)
    elif (run_dir / "sft" / "config.json").exists():
        base_dir = run_dir / "sft"
    else:
        path = run.load_config().model.path
        if not path:
            raise RunDirError(f"{run_dir} has no warm start (sft/) and no model.path; pass --base MODEL_DIR")
        base_dir = Path(path)
    if not (base_dir / "config.json").exists():
        raise RunDirError(f"base model {base_dir} not found (expected a HF model directory); pass --base")
    return trained, base_dir


def _success(model, run) -> np.ndarray:
    """Greedy held-out success of ``model`` through the opened run's collector."""
    ev = evaluate(model, run.tokenizer, run.eval_items, greedy=True,
                  max_new_tokens=run.config.rollout.max_new_tokens, collector=run.collector)
    return np.array([s >= SOLVED for s in ev.scores], dtype=float)


def diagnose_run(run_dir: str | Path, *, base: str | None = None, n: int = 256, probe: int = 64,
                 seed: int = 0, plots: bool = True, log=print) -> Path:
    """Run every diagnostic on ``run_dir`` and write the report; returns ``RUN_DIR/diagnose.md``."""
    from grpolab.runs import open_run
    from grpolab.train.sft import sft_batch

    run_dir = Path(run_dir)
    trained_dir, base_dir = resolve_models(run_dir, base)
    run = open_run(run_dir, n_eval=n, log=log)
    trained, tok, items = run.model, run.tokenizer, run.eval_items
    device = next(trained.parameters()).device
    base_model, _ = load_model(base_dir, dtype=next(trained.parameters()).dtype, device=device)
    trained.eval(); base_model.eval()
    W1, W0 = parameter_state(trained), parameter_state(base_model)
    groups = parameter_groups(trained)
    kinds = {k: groups[k] for k in GROUP_KINDS if groups[k]}
    layers = {g: v for g, v in groups.items() if g.startswith("layer.")}
    drift = parameter_drift(W0, W1, {**kinds, **layers})
    log(f"diagnose {run_dir}: trained {trained_dir}, base {base_dir}")

    # ---- causal localisation -------------------------------------------------------------
    s_trained, s_base = _success(trained, run), _success(base_model, run)
    causal: dict[str, Any] = {"trained": mean_interval(s_trained).to_dict(),
                              "base": mean_interval(s_base).to_dict(), "groups": {}}
    ablate = dict(kinds)
    if kinds.get("attention") and kinds.get("mlp"):  # the study's localisation: both blocks at once
        ablate["attention+mlp"] = kinds["attention"] + kinds["mlp"]
    import time

    from grpolab.utils.progress import format_seconds

    t0 = time.time()
    for i, (g, names) in enumerate(ablate.items(), 1):
        with swapped(trained, W0, names):
            rev = _success(trained, run)
        with swapped(base_model, W1, names):
            tra = _success(base_model, run)
        causal["groups"][g] = {
            "revert": mean_interval(rev).to_dict(), "transplant": mean_interval(tra).to_dict(),
            "revert_minus_trained": mean_interval(rev - s_trained).to_dict(),
            "transplant_minus_base": mean_interval(tra - s_base).to_dict(),
        }
        eta = (time.time() - t0) / i * (len(ablate) - i)  # progress: two evaluations per group
        log(f"  {g:13s} revert {rev.mean():.3f}  transplant {tra.mean():.3f}  [{i}/{len(ablate)} groups, "
            f"ETA {format_seconds(eta)}]")
    for name, w in parameter_state(trained).items():  # the ablations restored every weight exactly
        assert torch.equal(w, W1[name]), name

    # ---- effective ranks -----------------------------------------------------------------
    weight_ranks = []
    for name, w in W1.items():
        if w.dim() != 2:
            continue
        d = w - W0[name]
        weight_ranks.append({"name": name, "shape": list(w.shape), "base": effective_rank(W0[name]),
                             "trained": effective_rank(w), "update": effective_rank(d) if d.abs().max() > 0 else 0.0,
                             "max_rank": min(w.shape)})
    probe_items = items[:probe]
    ids, att, _ = sft_batch(tok, probe_items, device, prompt_format=getattr(run.collector, "prompt_format", None))
    hidden = {"base": hidden_state_effective_ranks(base_model, ids, att),
              "trained": hidden_state_effective_ranks(trained, ids, att), "tokens": int(att.sum())}

    result = {"run_dir": str(run_dir), "trained": str(trained_dir), "base": str(base_dir), "items": len(items),
              "drift": [d.to_dict() for d in drift], "causal": causal, "weight_ranks": weight_ranks,
              "hidden_ranks": hidden}
    figs = _plots(run_dir, result) if plots else []
    md = run_dir / "diagnose.md"
    atomic_write_text(md, _markdown(result, figs))
    atomic_write_json(run_dir / "diagnose.json", result)
    return md


def _layer_rank_means(weight_ranks, key):
    from grpolab.models import classify_parameter, layer_index

    out: dict[tuple[int, str], list[float]] = {}
    for r in weight_ranks:
        li = layer_index(r["name"])
        if li is None:
            continue
        out.setdefault((li, classify_parameter(r["name"])), []).append(r[key])
    return {k: float(np.mean(v)) for k, v in out.items()}


def _plots(run_dir: Path, res: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    figs = []
    kinds = [d for d in res["drift"] if not d["group"].startswith("layer.")]
    layer_groups = [d for d in res["drift"] if d["group"].count(".") == 2]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    axes[0].bar([d["group"] for d in kinds], [d["relative"] for d in kinds], color="tab:blue", label="|W-W0|/|W0|")
    ax2 = axes[0].twinx()
    ax2.plot([d["group"] for d in kinds], [d["share"] for d in kinds], "o-", color="tab:red", label="share of movement")
    axes[0].set_ylabel("relative change |W-W0|/|W0|"); ax2.set_ylabel("share of squared movement", color="tab:red")
    axes[0].set_title("drift per group")
    axes[1].bar([d["group"].replace("layer.", "L") for d in layer_groups], [d["relative"] for d in layer_groups])
    axes[1].tick_params(axis="x", rotation=90, labelsize=7); axes[1].set_title("drift per layer and kind")
    fig.tight_layout(); p = out / "diagnose_drift.png"; fig.savefig(p, dpi=110); plt.close(fig); figs.append(p)

    c = res["causal"]
    names = list(c["groups"])
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = np.arange(len(names))
    for off, key, lab in ((-0.2, "revert", "trained, group reverted to base"), (0.2, "transplant", "base + group from trained")):
        v = [c["groups"][g][key] for g in names]
        ax.bar(x + off, [e["value"] for e in v], width=0.4, label=lab,
               yerr=[[e["value"] - e["low"] for e in v], [e["high"] - e["value"] for e in v]], capsize=3)
    ax.axhline(c["trained"]["value"], color="k", ls="-", lw=1, label=f"trained {c['trained']['value']:.3f}")
    ax.axhline(c["base"]["value"], color="k", ls="--", lw=1, label=f"base {c['base']['value']:.3f}")
    ax.set_xticks(x, names); ax.set_ylabel("held-out success (greedy)")
    ax.set_title("causal localisation (95% CI over items)"); ax.legend(fontsize=7); ax.grid(alpha=0.3, axis="y")
    fig.tight_layout(); p = out / "diagnose_causal.png"; fig.savefig(p, dpi=110); plt.close(fig); figs.append(p)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    h = res["hidden_ranks"]
    axes[0].plot(h["base"], "o--", label="base"); axes[0].plot(h["trained"], "o-", label="trained")
    axes[0].set_xlabel("hidden state (0 = embeddings, i = after block i)"); axes[0].set_ylabel("effective rank")
    axes[0].set_title(f"hidden-state effective rank ({h['tokens']} probe tokens)"); axes[0].legend()
    for key, style in (("base", "--"), ("trained", "-"), ("update", ":")):
        m = _layer_rank_means(res["weight_ranks"], key)
        for kind in ("attention", "mlp"):
            pts = sorted((li, v) for (li, k), v in m.items() if k == kind)
            if pts:
                axes[1].plot([a for a, _ in pts], [b for _, b in pts], style, marker="o", label=f"{kind} {key}")
    axes[1].set_xlabel("layer"); axes[1].set_ylabel("mean effective rank of weight matrices")
    axes[1].set_title("weight / update effective rank"); axes[1].legend(fontsize=6)
    fig.tight_layout(); p = out / "diagnose_rank.png"; fig.savefig(p, dpi=110); plt.close(fig); figs.append(p)
    return figs


def _markdown(res: dict, figs: list[Path]) -> str:
    c = res["causal"]
    f = lambda e, s="": f"{e['value']:{s}.3f} [{e['low']:{s}.3f}, {e['high']:{s}.3f}]"  # noqa: E731
    change = c["trained"]["value"] - c["base"]["value"]
    lines = [f"# Diagnose: {res['run_dir']}", "",
             f"- trained: `{res['trained']}`; base: `{res['base']}`; {res['items']} held-out items, greedy; "
             "95% t intervals over items", "",
             f"Held-out success: base {f(c['base'])}, trained {f(c['trained'])} (change {change:+.3f}).", "",
             "## Drift", "", "| group | parameters | ‖W−W0‖/‖W0‖ | share of squared movement |", "|---|---|---|---|"]
    for d in res["drift"]:
        lines.append(f"| {d['group']} | {d['n_params']} | {d['relative']:.4f} | {d['share']:.3f} |")
    lines += ["", "## Causal localisation", "",
              "Revert: the trained model with this group set back to base weights. Transplant: the base "
              "model with this group taken from the trained one. If a group carries the change, reverting "
              "it moves success back towards base and transplanting it moves base towards trained.", "",
              "| group | revert | revert - trained | transplant | transplant - base |", "|---|---|---|---|---|"]
    for g, e in c["groups"].items():
        lines.append(f"| {g} | {f(e['revert'])} | {f(e['revert_minus_trained'], '+')} | {f(e['transplant'])} | "
                     f"{f(e['transplant_minus_base'], '+')} |")
    lines += ["", _reading(res), "", "## Effective ranks", "",
              "Hidden states (0 = embedding output, i = after block i), over "
              f"{res['hidden_ranks']['tokens']} probe tokens:", "",
              "| state | " + " | ".join(str(i) for i in range(len(res["hidden_ranks"]["base"]))) + " |",
              "|---|" + "---|" * len(res["hidden_ranks"]["base"])]
    for k in ("base", "trained"):
        lines.append(f"| {k} | " + " | ".join(f"{v:.2f}" for v in res["hidden_ranks"][k]) + " |")
    lines += ["", "Weight matrices (effective rank of base, trained, and the update W - W0; max = min(shape)):", "",
              "| parameter | shape | base | trained | update |", "|---|---|---|---|---|"]
    for r in res["weight_ranks"]:
        lines.append(f"| {r['name']} | {r['shape'][0]}x{r['shape'][1]} | {r['base']:.2f} | {r['trained']:.2f} | {r['update']:.2f} |")
    lines += [""] + [f"![{p.stem}](plots/{p.name})" for p in figs]
    return "\n".join(lines) + "\n"


def _reading(res: dict) -> str:
    """One paragraph that states the largest mover and which ablations move success, from the numbers."""
    c = res["causal"]
    kinds = [d for d in res["drift"] if not d["group"].startswith("layer.")]
    top = max(kinds, key=lambda d: d["share"])
    sig_rev = [g for g, e in c["groups"].items() if e["revert_minus_trained"]["low"] > 0 or e["revert_minus_trained"]["high"] < 0]
    sig_tra = [g for g, e in c["groups"].items() if e["transplant_minus_base"]["low"] > 0 or e["transplant_minus_base"]["high"] < 0]
    parts = [f"Reading: `{top['group']}` moved most ({top['share']:.0%} of the squared movement)."]
    inert = top["group"] not in sig_rev and top["group"] not in sig_tra
    if inert:
        parts.append(f"Neither reverting nor transplanting `{top['group']}` changes success beyond its CI: it moved but is causally inert here.")
    parts.append("Reverting changes success beyond its CI for: " + (", ".join(f"`{g}`" for g in sig_rev) or "no single group") + ".")
    parts.append("Transplanting changes base success beyond its CI for: " + (", ".join(f"`{g}`" for g in sig_tra) or "no single group") + ".")
    return " ".join(parts)
