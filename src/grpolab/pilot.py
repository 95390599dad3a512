"""The preflight's pilot: a few GRPO steps of the run's recipe, then the same items measured again.

``grpolab preflight --pilot STEPS`` (:mod:`grpolab.commands.preflight`) calls :func:`run_pilot` after
the start's measurement: it trains STEPS GRPO steps of the config (its seed, lr and batch) from the
measured model, measures the pilot's final model on the same held-out items with the same ``k``, and
lets the paired change decide GRPO's verdict (the rules: :mod:`grpolab.diagnostics.preflight.pilot`).
It trains and measures, so it sits above the trainer, beside :mod:`grpolab.runs`: ``measure/`` never
imports ``train/``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from grpolab.config import load_config
from grpolab.diagnostics.preflight import (
    MIN_ITEMS,
    NOT_INDICATED,
    PreflightResult,
    apply_pilot,
    pilot_from_outcomes,
    pilot_training,
)
from grpolab.measure.preflight import PreflightSpec, measure_preflight
from grpolab.models.io import load_model
from grpolab.train import train
from grpolab.train.checks import check_train
from grpolab.train.rundir import RunDir

__all__ = ["TRAIN_COST_FACTOR", "pilot_estimate", "run_pilot", "skip_reason"]

#: A training step's cost per response relative to the measurement's (sampling, scoring, the update's
#: forward and backward): a rough factor for the pilot's estimate, stated as such.
TRAIN_COST_FACTOR = 3.0


def pilot_estimate(res: PreflightResult, cfg, steps: int) -> float:
    """Seconds a pilot of ``steps`` steps should take: its training responses at the measurement's
    seconds per response x :data:`TRAIN_COST_FACTOR`, plus the measurement again."""
    per_response = res.settings["seconds"] / max(res.settings["responses"], 1)
    train = steps * cfg.rollout.prompts_per_step * cfg.rollout.group_size * per_response * TRAIN_COST_FACTOR
    return train + res.settings["seconds"]


def skip_reason(res: PreflightResult, cfg, steps: int, left: float | None) -> str | None:
    """Why the pilot is not run, or None."""
    if res.verdict() == NOT_INDICATED:
        return "GRPO is not indicated before it (nothing within reach to convert)"
    if res.stats.n_items < MIN_ITEMS:  # checked before training: the comparison would decide nothing
        return (f"{res.stats.n_items} item(s) measured and the pilot compares at least {MIN_ITEMS} "
                f"(raise --n or --budget)")
    if left is not None and pilot_estimate(res, cfg, steps) > left:
        return (f"its estimated {pilot_estimate(res, cfg, steps):.0f} s would pass --budget ({left:.0f} s left); "
                f"raise --budget or lower --pilot")
    return None


def run_pilot(res: PreflightResult, run, model: str | None, config: str | None, overrides, *, steps: int, out_dir: Path,
              spec: PreflightSpec, left: float | None, log, clock) -> PreflightResult:
    """Train ``steps`` GRPO steps of the run's config (its seed, lr, batch) from the measured model into
    ``out_dir`` (replaced), measure its final model on the same items with the same ``k`` and sampling
    seed (within what is left of the budget), and let the paired change decide GRPO's verdict
    (:func:`grpolab.diagnostics.preflight.apply_pilot`), with the pilot's training record (how many steps
    updated). The pilot never warm-starts (``sft.enabled=no``): it trains the model the preflight measured.
    Skipped where GRPO is already "not indicated", on too few items, or where it would pass the budget.

    ``res``: the start's measurement (:class:`~grpolab.diagnostics.preflight.PreflightResult`), returned
    with the pilot applied; ``run``: the opened run (:func:`grpolab.runs.open_run`); ``model``,
    ``config``, ``overrides``: what to train from and with; ``left``: seconds of the budget left (None:
    no limit)."""
    why = skip_reason(res, run.config, steps, left)
    if why:
        log(f"pilot: skipped, {why}")
        return res
    t0 = clock()
    sets = list(overrides) + ([f"model.path={model}"] if model is not None else []) + [
        f"trainer.steps={steps}", f"trainer.eval_every={steps}", f"trainer.save_every={steps}",
        "trainer.preflight=false", f"trainer.run_dir={out_dir}",
        "sft.enabled=no"]  # GRPO from exactly the measured model (no warm start in between)
    tcfg = load_config(config, sets)
    check_train(tcfg, resume=False, overwrite=True)
    log(f"pilot: {steps} GRPO steps of this config (seed {tcfg.trainer.seed}, lr {tcfg.optim.lr:g}) into {out_dir}, "
        f"about {pilot_estimate(res, run.config, steps):.0f} s estimated")
    train(tcfg, overwrite=True, log=log)
    rows = [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    training = pilot_training(rows)
    trained, _ = load_model(RunDir(out_dir).model_dir(), device=next(run.model.parameters()).device)
    trained.eval()
    items = list(run.eval_items[:res.stats.n_items])
    log(f"pilot: {training.updates} of {training.steps} steps updated; measuring the pilot's model on the same "
        f"{len(items)} items x {spec.k}")
    budget = max(1e-3, left - (clock() - t0)) if left is not None else 0.0
    after = measure_preflight(trained, run.tokenizer, items, run.collector,
                              dataclasses.replace(spec, readability=False, until_decided=0, budget=budget), log=log,
                              clock=clock)
    if after.stats.n_items < MIN_ITEMS:
        log(f"pilot: its re-measurement reached --budget after {after.stats.n_items} item(s), fewer than the "
            f"{MIN_ITEMS} it compares; the pilot decides nothing (raise --budget)")
        return res
    p = pilot_from_outcomes(res, after, steps=steps, run_dir=str(out_dir), training=training)
    p.trainer_seed = tcfg.trainer.seed
    return apply_pilot(res, p)
