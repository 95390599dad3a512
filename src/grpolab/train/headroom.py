"""Measure headroom (greedy vs sampled success) of a model on task items; write it to a run dir.

The statistics and the verdict are pure functions in :mod:`grpolab.diagnostics.headroom`; this
module runs the model. Sampling uses its own ``torch.Generator``, so calling it (e.g. at the start
of ``grpolab train``) leaves every other random stream untouched.
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpolab.diagnostics.headroom import HeadroomResult, family_of, headroom_from_outcomes, headroom_markdown
from grpolab.train.evaluate import SOLVED, evaluate
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["measure_headroom", "write_headroom"]


def measure_headroom(model, tokenizer, items, *, k: int = 8, temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 48, seed: int = 0, source: str = "",
                     batch_size: int = 256, env=None, collector=None) -> HeadroomResult:
    """Greedy success, sampled success (k samples per item at ``temperature``) and pass@k, with CIs.

    ``env``: an :class:`grpolab.config.EnvConfig` for multi-turn tasks (episodes instead of single
    completions), passed to :func:`grpolab.train.evaluate.evaluate`.
    """
    if not items:
        raise ValueError("measure_headroom needs at least one item")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    was_training = model.training
    kw = {"env": env} if env is not None else {}
    if collector is not None:  # the run's collector: its prompt format and stop tokens
        kw["collector"] = collector
    greedy = evaluate(model, tokenizer, items, greedy=True, max_new_tokens=max_new_tokens,
                      batch_size=batch_size, **kw)
    gen = torch.Generator().manual_seed(int(seed))
    sampled = evaluate(model, tokenizer, items, greedy=False, samples=k, temperature=temperature,
                       top_p=top_p, max_new_tokens=max_new_tokens, generator=gen, batch_size=batch_size, **kw)
    if was_training:
        model.train()
    g = [s >= SOLVED for s in greedy.scores]
    c = [sum(s >= SOLVED for s in sampled.scores[i * k:(i + 1) * k]) for i in range(len(items))]
    res = headroom_from_outcomes(g, c, k, [family_of(it.meta) for it in items], seed=seed)
    res.temperature = temperature
    res.source = source
    return res


def write_headroom(out_dir: str | Path, res: HeadroomResult, name: str = "headroom") -> tuple[Path, Path]:
    """Write ``NAME.json`` and ``NAME.md`` in ``out_dir`` (atomically)."""
    out = Path(out_dir)
    j, m = out / f"{name}.json", out / f"{name}.md"
    atomic_write_json(j, res.to_dict())
    atomic_write_text(m, headroom_markdown(res))
    return j, m


#: The automatic check at the start of ``grpolab train``: a few seconds on the default config.
TRAIN_CHECK_ITEMS = 64
TRAIN_CHECK_K = 8


def run_headroom_check(policy, tokenizer, eval_items, cfg, run_dir, *, log=print, collector=None) -> HeadroomResult:
    """The headroom check ``train`` runs before RL (``trainer.headroom``); writes headroom.{json,md}.

    Uses the first :data:`TRAIN_CHECK_ITEMS` held-out items x :data:`TRAIN_CHECK_K` samples at the
    rollout temperature, with a generator seeded from ``trainer.seed`` that nothing else shares.
    """
    res = measure_headroom(
        policy, tokenizer, eval_items[:TRAIN_CHECK_ITEMS], k=TRAIN_CHECK_K,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
        max_new_tokens=cfg.rollout.max_new_tokens, seed=cfg.trainer.seed + 7919,
        source=cfg.model.path or "policy at the start of RL", env=getattr(cfg, "env", None),
        collector=collector,
    )
    write_headroom(run_dir, res)
    log(f"headroom ({len(eval_items[:TRAIN_CHECK_ITEMS])} held-out items x {TRAIN_CHECK_K} samples): {res.message}")
    return res


def headroom_command(model: str | Path, *, task: str | None = None, task_options: list[str] = (),
                     n: int | None = None, k: int = 8, temperature: float | None = None,
                     max_new_tokens: int | None = None, seed: int = 0,
                     out: str | Path | None = None, config: str | Path | None = None,
                     overrides: list[str] = ()) -> HeadroomResult:
    """``grpolab headroom MODEL_OR_RUN``: load, measure on held-out items, write headroom.{json,md}.

    A run directory contributes its task (unless ``task`` is given), its ``task.n_eval`` (unless
    ``n`` is given; without a run, 256), its rollout temperature and length (unless given), and its trained model (``final/``, else the newest checkpoint, else the
    warm start ``sft/``); results are written there unless ``out`` says otherwise. A bare model
    directory can take the same settings from a training ``config`` (+ ``overrides``), e.g. a
    warm start measured on the task and environment of the runs that will start from it.
    """
    import yaml

    from grpolab.config import ConfigError, TaskConfig
    from grpolab.models import load_model
    from grpolab.train.setup import build_task

    from grpolab.train.rundir import resolve_model

    src, run_cfg = resolve_model(model)
    run_dir = Path(model) if run_cfg is not None else None
    if config is not None or overrides:
        from grpolab.config import load_config

        if run_cfg is not None:
            raise ConfigError(f"{model} is a run directory and brings its own config; drop --config/--set, "
                              "or pass the model directory itself")
        run_cfg = load_config(config, list(overrides))
    if n is None:
        n = run_cfg.task.n_eval if run_cfg is not None and task is None else 256
    task_cfg = TaskConfig(name=task or "arith", n_eval=n)
    env = None
    if run_cfg is not None:
        if task is None:
            task_cfg = TaskConfig(name=run_cfg.task.name, options=dict(run_cfg.task.options), n_eval=n)
            env = run_cfg.env  # multi-turn tasks are measured as episodes
        temperature = run_cfg.rollout.temperature if temperature is None else temperature
        max_new_tokens = run_cfg.rollout.max_new_tokens if max_new_tokens is None else max_new_tokens
    for kv in task_options:
        if "=" not in kv:
            raise ConfigError(f"--task-option {kv!r} must look like KEY=VALUE")
        key, v = kv.split("=", 1)
        task_cfg.options[key] = yaml.safe_load(v)
    temperature = 1.0 if temperature is None else temperature
    max_new_tokens = 48 if max_new_tokens is None else max_new_tokens
    lm, tok = load_model(src)
    items = build_task(task_cfg).items("eval", n)
    res = measure_headroom(lm, tok, items, k=k, temperature=temperature, max_new_tokens=max_new_tokens,
                           seed=seed, source=str(src), env=env)
    target = Path(out) if out is not None else run_dir
    if target is not None:
        j, m = write_headroom(target, res)
        print(f"wrote {j} and {m}")
    print(headroom_markdown(res))
    return res
