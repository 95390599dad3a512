"""One door into a run: everything that measures a run, a model or a config.

:func:`open_run` turns a run directory, a model directory or a config into what measures it.

``grpolab eval``, ``preflight``, ``diagnose`` and ``credit`` and ``grpolab sft`` open what they
measure here, and the warm start's accuracy checks collect through the collector built the same
way; all of it comes from the setup functions :func:`grpolab.train.loop.start_run` uses
(:func:`~grpolab.train.setup.build_policy`, :func:`~grpolab.train.setup.build_task`,
:func:`~grpolab.train.setup.resolve_prompt_format`, :func:`~grpolab.rollout.collector.collector_for`,
:func:`~grpolab.models.stop_token_ids`). So every command prompts a model exactly as training
does -- the chat template whenever the tokenizer defines one and ``task.chat_template`` is not
``off`` -- and prints one line saying which format it uses.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from grpolab.config import Config, ConfigError, EnvConfig, TaskConfig

__all__ = ["OpenedRun", "greedy_episodes", "greedy_eval", "heldout_items", "open_run", "parse_task_options"]


@dataclass
class OpenedRun:
    """A model opened for measurement, with the run's (or config's) settings.

    Attributes:
        config: the run's config (a run directory), the given config, or the defaults, with the
            command's overrides (task, ``n_eval``, ``max_new_tokens``) applied.
        model, tokenizer: the model in eval mode and its tokenizer.
        prompt_format: the resolved :class:`grpolab.tasks.PromptFormat` ("on"/"off").
        stop_ids: the ids that end a response (:func:`grpolab.models.stop_token_ids`).
        collector: the run's collector (single-turn or episodes) with that format and stop ids.
        eval_items: the held-out items (``task.n_eval`` of them; all rows / 256 when unset).
        train_items: the training split when asked for (``train_items=True``), else None.
        model_dir: the directory the model was loaded from (None: the tiny model built from scratch).
        run_dir: the run directory when one was opened, else None.
        from_scratch: the model was built from scratch (the tiny default) rather than loaded.
    """

    config: Config
    model: Any
    tokenizer: Any
    prompt_format: Any
    stop_ids: list[int]
    collector: Any
    eval_items: list
    train_items: list | None = None
    model_dir: Path | None = None
    run_dir: Path | None = None
    from_scratch: bool = False

    @property
    def env(self) -> EnvConfig | None:
        """The run's environment when it plays episodes, else None."""
        return self.config.env if self.config.env.name else None


def parse_task_options(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` (``--task-option``) as a mapping with YAML values."""
    import yaml

    out = {}
    for kv in pairs:
        if "=" not in kv:
            raise ConfigError(f"--task-option {kv!r} must look like KEY=VALUE")
        k, v = kv.split("=", 1)
        out[k] = yaml.safe_load(v)
    return out


def _source(path: str | os.PathLike | None, config, overrides: Sequence[str]) -> tuple[Config, Path | None, Path | None]:
    """``(config, model_dir, run_dir)`` for what ``open_run`` was given."""
    from grpolab.config import load_config
    from grpolab.train.rundir import resolve_model

    if path is None:
        cfg = config if isinstance(config, Config) else load_config(config, list(overrides))
        return cfg, Path(cfg.model.path) if cfg.model.path else None, None
    model_dir, run_cfg = resolve_model(path)
    if run_cfg is not None:
        if config is not None or overrides:
            raise ConfigError(f"{path} is a run directory and brings its own config; drop --config/--set, "
                              "or pass the model directory itself")
        return run_cfg, model_dir, Path(path)
    cfg = config if isinstance(config, Config) else load_config(config, list(overrides))
    return cfg, model_dir, None


def _apply(cfg: Config, *, task: str | None, task_options: dict, n_eval: int | None,
           max_new_tokens: int | None) -> Config:
    """The command's overrides on a copy of ``cfg``. Another ``task`` keeps the model's
    ``task.chat_template`` but not the run's task options, prompt template or environment."""
    cfg = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, options=dict(cfg.task.options)),
                              rollout=dataclasses.replace(cfg.rollout))
    if task is not None:
        cfg.task = TaskConfig(name=task, chat_template=cfg.task.chat_template)
        cfg.env = EnvConfig()
    if n_eval is not None:
        cfg.task.n_eval = n_eval
    if max_new_tokens is not None:
        cfg.rollout.max_new_tokens = max_new_tokens
    cfg.task.options.update(task_options)
    try:
        cfg.task.validate()
        cfg.rollout.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return cfg


def _heldout(cfg: Config, *, with_train: bool, log) -> tuple[list, list | None]:
    from grpolab.tasks import TooFewItems
    from grpolab.train.setup import build_task, build_task_splits

    if with_train:
        train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed, log=log)
        return list(eval_items), list(train_items)
    try:
        items = build_task(cfg.task).items("eval", cfg.task.n_eval)
    except TooFewItems as e:
        raise ConfigError(f"{e} (--n {e.available}, or leave --n unset for all rows)") from None
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        raise ConfigError(f"task {cfg.task.name!r} (task.options): {e}") from None
    if not items:
        raise ConfigError(f"task {cfg.task.name!r} produced no held-out items")
    return list(items), None


def open_run(path: str | os.PathLike | None = None, config: str | os.PathLike | Config | None = None,
             overrides: Sequence[str] = (), *, task: str | None = None, task_options: Sequence[str] | dict = (),
             n_eval: int | None = None, max_new_tokens: int | None = None, train_items: bool = False,
             log: Callable[[str], None] = print) -> OpenedRun:
    """Open a run directory, a model directory or a config for measurement.

    Args:
        path: a grpolab run directory (its config, and its newest model:
            :meth:`grpolab.train.rundir.RunDir.model_dir`), a model directory (HF format; measured
            with ``config`` + ``overrides`` when given, else the default config), or None (the
            model the config names: ``model.path``, or the tiny model built from scratch).
        config, overrides: a training config (path or :class:`Config`) and ``--set`` values, for a
            model directory or None; refused with a run directory (it brings its own).
        task, task_options, n_eval, max_new_tokens: the command's overrides of the config's
            task (``task_options``: ``["k=v", ...]`` or a mapping), held-out size and length.
        train_items: also build the training split (the warm start needs it).
        log: where the one ``prompts: ...`` line goes (and the task's split notes).
    """
    from grpolab.models import stop_token_ids
    from grpolab.rollout.collector import collector_for
    from grpolab.train.setup import build_policy, model_context, resolve_device, resolve_prompt_format

    cfg, model_dir, run_dir = _source(path, config, overrides)
    if run_dir is not None and model_dir is not None and model_dir.name != "final":  # say so, never silently
        log(f"model: {model_dir} -- {run_dir} has no final/ (its training has not finished)")
    opts = dict(task_options) if isinstance(task_options, dict) else parse_task_options(task_options)
    cfg = _apply(cfg, task=task, task_options=opts, n_eval=n_eval, max_new_tokens=max_new_tokens)
    eval_items, train = _heldout(cfg, with_train=train_items, log=log)
    # the config's model as configured (``grpolab sft`` trains it), or the opened directory's for measuring
    model_cfg = cfg.model if path is None else dataclasses.replace(cfg.model, path=str(model_dir),
                                                                     gradient_checkpointing=False)
    model, tok, from_scratch = build_policy(model_cfg, seed=cfg.trainer.seed,
                                            device=resolve_device(cfg.model.device))
    model.eval()
    fmt = resolve_prompt_format(cfg, tok, eval_items + (train or []), log=log, context=model_context(model))
    stop_ids = stop_token_ids(model, tok)
    return OpenedRun(config=cfg, model=model, tokenizer=tok, prompt_format=fmt, stop_ids=stop_ids,
                     collector=collector_for(cfg, tok, prompt_format=fmt, stop_ids=stop_ids),
                     eval_items=eval_items, train_items=train, model_dir=model_dir, run_dir=run_dir,
                     from_scratch=from_scratch)


def heldout_items(config: str | os.PathLike | None, n_eval: int, overrides: Sequence[str] = ()) -> tuple[list, Config]:
    """``(items, cfg)``: the first ``n_eval`` held-out items of ``config``'s task and the loaded
    config (with a small training split: only the held-out one is used). The benchmarks that pair
    models on the same items use it."""
    from grpolab.config import load_config
    from grpolab.train.setup import build_task_splits

    cfg = load_config(config, [f"task.n_eval={n_eval}", "task.n_train=64", *overrides])
    _, items = build_task_splits(cfg.task)
    return items, cfg


def greedy_eval(model_dir: str | os.PathLike, items: list, env):
    """``model_dir``'s greedy evaluation (:class:`grpolab.measure.evaluate.EvalResult`: per-item
    scores and transcripts) on ``items`` as episodes in the environment ``env`` (a config's
    ``env`` section; environments write their own plain-text prompts)."""
    from grpolab.models import load_model
    from grpolab.measure.evaluate import evaluate

    model, tok = load_model(model_dir)
    return evaluate(model, tok, items, env=env)


def greedy_episodes(model_dir: str | os.PathLike, config: str | os.PathLike, n_eval: int) -> tuple[list, list[bool]]:
    """``(items, solved)``: the first ``n_eval`` held-out items of ``config``'s task and whether
    ``model_dir`` solves each one in a greedy episode (:func:`heldout_items`, :func:`greedy_eval`)."""
    from grpolab.measure.evaluate import SOLVED

    items, cfg = heldout_items(config, n_eval)
    res = greedy_eval(model_dir, items, cfg.env)
    return items, [s >= SOLVED for s in res.scores]
