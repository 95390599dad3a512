"""Building what a run needs from its config: device, policy, task splits, warm start."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable

import torch

from grpolab.config import Config, ConfigError, ModelConfig, TaskConfig


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def build_policy(cfg: ModelConfig, *, seed: int, device: torch.device):
    """``(model, tokenizer, from_scratch)``: a local HF model, or the tiny default built from scratch."""
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, load_model

    if cfg.path:
        try:
            model, tokenizer = load_model(cfg.path, dtype=cfg.dtype, device=device)
        except (FileNotFoundError, NotADirectoryError) as e:
            raise ConfigError(f"model.path={cfg.path!r}: {e}") from None
        return model, tokenizer, False
    tokenizer = build_tokenizer()
    tiny = TinyModelConfig(
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
    )
    model = build_tiny_model(tokenizer, tiny, seed=seed).to(device)
    return model, tokenizer, True


def build_task(cfg: TaskConfig):
    from grpolab.tasks import get_task

    try:
        return get_task(cfg.name, **cfg.options)
    except TypeError as e:
        raise ConfigError(f"task.options for task {cfg.name!r}: {e}") from None
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:  # e.g. a dataset file
        raise ConfigError(f"task {cfg.name!r} (task.options): {e}") from None


def build_task_splits(cfg: TaskConfig, *, seed: int = 0):
    """``(train_items, eval_items)``: fixed, disjoint, deterministic."""
    task = build_task(cfg)
    try:
        train_items = task.items("train", cfg.n_train)
        eval_items = task.items("eval", cfg.n_eval)
    except (FileNotFoundError, NotADirectoryError, ValueError) as e:
        raise ConfigError(f"task {cfg.name!r} (task.options): {e}") from None
    if not train_items:
        raise ConfigError(f"task {cfg.name!r} produced no training items")
    if not eval_items:
        raise ConfigError(f"task {cfg.name!r} produced no held-out items; raise task.n_eval")
    return train_items, eval_items


def warm_start(cfg: Config, model, tokenizer, from_scratch: bool, train_items, eval_items,
               run_dir, *, log: Callable[[str], None] = print):
    """Supervised warm start, once per run directory (cached in ``RUN_DIR/sft``).

    The cache is reused only when it was built with the same settings
    (:func:`grpolab.train.rundir.warm_start_key`: model, task, sft section, seed, ...); with
    other settings it is rebuilt. A cache from an older grpolab without a settings record is
    reused as it is (and said so).
    """
    from grpolab.models import load_model, save_model
    from grpolab.train.rundir import RunDir

    enabled = cfg.sft.enabled == "yes" or (cfg.sft.enabled == "auto" and from_scratch)
    if not enabled:
        return model
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    status, diffs = rd.warm_start_status(cfg)
    if status in ("match", "legacy"):
        log(f"warm start: reusing {rd.sft}" + (" (no settings record: built by an older grpolab)"
                                               if status == "legacy" else ""))
        cached, _ = load_model(rd.sft, device=next(model.parameters()).device)
        model.load_state_dict(cached.state_dict())
        return model
    if status == "differs":
        log(f"warm start: {rd.sft} was built with other settings ({'; '.join(diffs[:3])}); rebuilding it")
    elif status == "incomplete":
        log(f"warm start: {rd.sft} has no sft.json record (its writer was interrupted); rebuilding it")
    where = "validation items held out of the training split" if cfg.sft.select_on == "validation" \
        else "held-out items"
    log(f"warm start: supervised training on demonstrations until greedy accuracy on {where} >= "
        f"{cfg.sft.target_accuracy:.2f} (at most {cfg.sft.max_steps} steps)")
    t0 = time.time()
    result = sft_from_config(cfg, model, tokenizer, train_items, eval_items, log=log)
    save_model(model, tokenizer, rd.sft)
    write_sft_record(rd.sft, cfg, result, time.time() - t0)
    return model


def sft_from_config(cfg: Config, model, tokenizer, train_items, eval_items, *,
                    log: Callable[[str], None] = print):
    """Run the supervised warm start with the ``sft`` section of ``cfg`` (model trained in place)."""
    from grpolab.train.sft import run_sft

    demos, select_items = sft_selection_split(cfg, train_items, eval_items)
    return run_sft(
        model, tokenizer, demos, select_items, max_steps=cfg.sft.max_steps,
        batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, target_accuracy=cfg.sft.target_accuracy,
        eval_every=cfg.sft.eval_every, max_new_tokens=cfg.rollout.max_new_tokens,
        schedule=cfg.sft.schedule, ema=cfg.sft.ema,
        seed=cfg.trainer.seed, log=log, env=cfg.env,
        privileged_share=cfg.sft.privileged_share, teacher_template=cfg.credit.template,
    )


def sft_selection_split(cfg: Config, train_items, eval_items):
    """``(demonstration_items, selection_items)`` for the warm start, per ``sft.select_on``.

    "validation": the last ``sft.n_eval`` training items (at most a quarter of them) are held out
    of the demonstrations and decide when to stop, so the held-out test set that measures RL's gain
    plays no part in choosing the warm start. "heldout": train on every training item and stop on
    the first ``sft.n_eval`` held-out items.
    """
    if cfg.sft.select_on == "heldout":
        return list(train_items), list(eval_items[: cfg.sft.n_eval])
    n_val = min(cfg.sft.n_eval, len(train_items) // 4)
    if n_val < 1:
        raise ConfigError(
            f"sft.select_on=validation holds out a quarter of the training items to decide when the "
            f"warm start stops, but the task has only {len(train_items)} training item(s); raise "
            f"task.n_train or set sft.select_on=heldout"
        )
    return list(train_items[:-n_val]), list(train_items[-n_val:])


def write_sft_record(model_dir: Path, cfg: Config, result, seconds: float) -> None:
    """``MODEL_DIR/sft.json``: steps, accuracy, the check history, the ``sft`` settings used and
    the warm-start key (the settings that produced it; see :func:`grpolab.train.rundir.warm_start_key`)."""
    from grpolab.train.rundir import warm_start_key
    from grpolab.utils.io import atomic_write_json

    atomic_write_json(Path(model_dir) / "sft.json", {
        "steps": result.steps, "accuracy": result.accuracy, "history": result.history,
        "seconds": seconds, "sft_config": dataclasses.asdict(cfg.sft), "key": warm_start_key(cfg),
    })
