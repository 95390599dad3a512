"""``grpolab preflight MODEL_OR_RUN``: before a run, which method can help here?

Opens the model with :func:`grpolab.runs.open_run` (a run directory brings its config; a bare model
directory takes ``--config`` + ``--set``, so it is measured exactly as training will prompt, sample
and score it), measures it with :func:`grpolab.train.preflight.measure_preflight` -- within
``--budget`` seconds when given -- and writes ``preflight.json`` and ``preflight.md``
(:mod:`grpolab.diagnostics.preflight`: the verdicts, the numbers they rest on, the thresholds and
the ``--set`` lines to use).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

__all__ = ["preflight_command"]


def _open(model, config, overrides, n, log):
    """:func:`grpolab.runs.open_run` with ``n`` held-out items, or all of them when the task holds fewer."""
    from grpolab.config import ConfigError
    from grpolab.runs import open_run

    try:
        return open_run(model, config, overrides, n_eval=n, log=log)
    except ConfigError as e:
        m = re.search(r"has only (\d+) eval items", str(e))
        if n is None or not m or int(m.group(1)) == 0:
            raise
        log(f"the task holds {m.group(1)} held-out items; measuring all of them")
        return open_run(model, config, overrides, n_eval=int(m.group(1)), log=log)


def preflight_command(model: str, *, config: str | None = None, overrides: list[str] = (), n: int | None = 128,
                      k: int | None = None, budget: float = 0.0, seed: int = 0, out: str | None = None,
                      readability: bool = True, until_decided: int = 0, pilot: int = 0,
                      log: Callable[[str], None] = print) -> int:
    """Measure ``model`` (a model directory, a run directory, or None: the config's model) on ``n``
    held-out items with ``k`` samples each (default: the run's group size, at least 8) and write
    ``preflight.{json,md}`` to ``out`` (default: the run directory, else ``runs/preflight``).
    ``until_decided`` > 0: stop once that many items are measured and the GRPO verdict is decided.
    ``pilot`` > 0: then train that many GRPO steps of the config into ``OUT/pilot`` and measure the
    same items again; the paired change decides GRPO's verdict (:func:`_pilot`)."""
    from grpolab.config import ConfigError
    from grpolab.train.preflight import default_k, is_off_policy, measure_preflight, write_preflight

    if budget < 0:
        raise ConfigError(f"--budget {budget:g}: must be >= 0 seconds (0 = no limit)")
    if pilot < 0:
        raise ConfigError(f"--pilot {pilot}: must be >= 0 GRPO steps (0 = no pilot)")
    if out is not None:  # a file or a read-only folder is refused before the measuring, not after it
        from grpolab.train.checks import check_writable

        check_writable(out, "--out", directory=True)
    run = _open(model, config, overrides, n, log)
    cfg = run.config
    k = k or default_k(cfg)
    res = measure_preflight(
        run.model, run.tokenizer, run.eval_items, run.collector, k=k, group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_new_tokens=cfg.rollout.max_new_tokens,
        seed=seed, budget=budget, readability=readability, prompt_format=run.prompt_format, credit=cfg.credit,
        off_policy=is_off_policy(cfg), log=log, until_decided=until_decided,
        settings={"model": str(run.model_dir) if run.model_dir else "the tiny model built from scratch",
                  "task": cfg.task.name, "task_options": cfg.task.options or None})
    target = Path(out) if out is not None else (run.run_dir if run.run_dir is not None else Path("runs/preflight"))
    if pilot:
        if run.run_dir is not None:  # a run directory: train from the model it holds, with its config
            model, config = str(run.model_dir), config or str(run.run_dir / "config.yaml")
            log(f"pilot: from the run's model {model} with {config}")
        res = _pilot(res, run, model, config, overrides, steps=pilot, out_dir=target / "pilot", k=k, seed=seed,
                     log=log)
    j, m = write_preflight(target, res)
    width = max(len(x.method) for x in res.methods)
    for x in res.methods:
        log(f"  {x.method:<{width}}  {x.verdict:<13}  {x.rests_on}")
        for line in x.set_lines:
            log(f"  {'':<{width}}  {'':<13}  --set {line}" if "=" in line else f"  {'':<{width}}  {'':<13}  {line}")
    log(res.message)
    log(f"wrote {j} and {m}")
    return 0


def _pilot(res, run, model, config, overrides, *, steps: int, out_dir: Path, k: int, seed: int, log):
    """Train ``steps`` GRPO steps of the run's config (its seed, lr, batch) from the measured model into
    ``out_dir`` (replaced), measure its final model on the same items with the same ``k`` and sampling
    seed, and let the paired change decide GRPO's verdict (:func:`grpolab.diagnostics.preflight.apply_pilot`).
    The pilot never warm-starts (``sft.enabled=no``): it trains the model the preflight measured.
    Skipped where GRPO is already "not indicated" (nothing within reach)."""
    from grpolab.config import load_config
    from grpolab.diagnostics.preflight import MIN_ITEMS, NOT_INDICATED, apply_pilot, pilot_from_outcomes
    from grpolab.models.io import load_model
    from grpolab.train import train
    from grpolab.train.checks import check_train
    from grpolab.train.preflight import is_off_policy, measure_preflight
    from grpolab.train.rundir import RunDir

    if res.verdict("GRPO") == NOT_INDICATED:
        log("pilot: skipped, GRPO is not indicated before it (nothing within reach to convert)")
        return res
    if res.stats["n_items"] < MIN_ITEMS:  # checked before training: the comparison would decide nothing
        log(f"pilot: skipped, {res.stats['n_items']} item(s) measured and the pilot compares at least {MIN_ITEMS} "
            f"(raise --n or --budget)")
        return res
    cfg = run.config
    sets = list(overrides) + ([f"model.path={model}"] if model is not None else []) + [
        f"trainer.steps={steps}", f"trainer.eval_every={steps}", f"trainer.save_every={steps}",
        "trainer.headroom=false", f"trainer.run_dir={out_dir}",
        "sft.enabled=no"]  # GRPO from exactly the measured model (no warm start in between)
    tcfg = load_config(config, sets)
    check_train(tcfg, resume=False, overwrite=True)
    log(f"pilot: {steps} GRPO steps of this config (seed {tcfg.trainer.seed}, lr {tcfg.optim.lr:g}) into {out_dir}")
    train(tcfg, overwrite=True, log=log)
    trained, _ = load_model(RunDir(out_dir).model_dir(), device=next(run.model.parameters()).device)
    trained.eval()
    items = list(run.eval_items[:res.stats["n_items"]])
    log(f"pilot: measuring the pilot's model on the same {len(items)} items x {k}")
    after = measure_preflight(
        trained, run.tokenizer, items, run.collector, k=k, group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_new_tokens=cfg.rollout.max_new_tokens,
        seed=seed, readability=False, off_policy=is_off_policy(cfg), log=log)
    p = pilot_from_outcomes(res, after, steps=steps, seed=seed, run_dir=str(out_dir))
    p["trainer_seed"] = tcfg.trainer.seed
    return apply_pilot(res, p)
