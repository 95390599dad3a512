"""Building what a run needs from its config: device, policy, task splits, warm start."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from grpolab.config import Config, ConfigError, ModelConfig, TaskConfig


def resolve_device(name: str) -> torch.device:
    """``model.device`` as a torch device; a GPU that is not there is a :class:`ConfigError`."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    from grpolab.config import ConfigError

    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"model.device={name!r} is not a device; choose auto, cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(f"model.device={name!r} but torch sees no CUDA GPU on this machine; set "
                              "model.device=cpu (or auto)")
        if device.index is not None and device.index >= n:
            raise ConfigError(f"model.device={name!r} but torch sees {n} CUDA GPU(s) (cuda:0..cuda:{n - 1})")
    if device.type == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("model.device='mps' but this machine has no Apple MPS device; set model.device=cpu")
    return device


def build_policy(cfg: ModelConfig, *, seed: int, device: torch.device):
    """``(model, tokenizer, from_scratch)``: a local HF model, or the tiny default built from scratch.

    ``model.dtype`` (``auto``: the checkpoint's own), ``model.attn_implementation`` and
    ``model.gradient_checkpointing`` apply here; LoRA adapters are added after any warm start
    (:func:`prepare_policy`).
    """
    from grpolab.models import (PRINTABLE_ALPHABET, TinyModelConfig, build_tiny_model, build_tokenizer,
                                enable_gradient_checkpointing, load_model)

    if cfg.path:
        try:
            model, tokenizer = load_model(cfg.path, dtype=cfg.dtype, device=device,
                                          attn_implementation=cfg.attn_implementation or None,
                                          gradient_checkpointing=cfg.gradient_checkpointing)
        except (FileNotFoundError, NotADirectoryError, ValueError, ImportError, OSError) as e:
            raise ConfigError(f"model.path={cfg.path!r}: {' '.join(str(e).split())}") from None
        return model, tokenizer, False
    tokenizer = build_tokenizer(PRINTABLE_ALPHABET if cfg.tokenizer_alphabet == "printable" else None)
    tiny = TinyModelConfig(
        hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, intermediate_size=cfg.intermediate_size,
    )
    model = build_tiny_model(tokenizer, tiny, seed=seed).to(device)
    if cfg.dtype != "auto":
        model = model.to(getattr(torch, cfg.dtype))
    if cfg.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, tokenizer, True


def prepare_policy(cfg: ModelConfig, model):
    """Add the configured LoRA adapters (``model.lora``) to the policy in place; returns it."""
    if not cfg.lora:
        return model
    from grpolab.models.lora import apply_lora

    try:
        return apply_lora(model, cfg.lora)
    except (ValueError, ImportError) as e:
        raise ConfigError(f"model.lora: {e}") from None


def resolve_prompt_format(cfg: Config, tokenizer, items, *, log: Callable[[str], None] = print):
    """The run's :class:`grpolab.tasks.PromptFormat` with ``chat_template`` decided, after checking
    that every item's prompt encodes (the tiny tokenizer refuses text it cannot encode: the error
    names the item). Logs one line saying which format the run uses (:func:`prompt_format_line`)."""
    try:
        fmt = cfg.task.prompt_format().resolve(tokenizer)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for i, it in enumerate(items):
        try:
            fmt.encode([it], tokenizer)
        except ValueError as e:
            raise ConfigError(f"task {cfg.task.name!r}, prompt of item {i} ({it.prompt[:40]!r}...): {e}") from None
    log(prompt_format_line(cfg, fmt))
    return fmt


def prompt_format_line(cfg: Config, fmt) -> str:
    """``prompts: ...``: the format a run (or a command measuring it) prompts the model with."""
    if cfg.env.name:  # episodes: the environment writes the prompt; no chat template applies
        return f"prompts: plain text written by the {cfg.env.name!r} environment (episodes use no chat template)"
    setting = f"task.chat_template={cfg.task.chat_template}"
    hint = "; set off for plain text" if fmt.use_chat else ""
    return f"prompts: {fmt.describe()} ({setting}{hint})"


def save_final(cfg: ModelConfig, model, tokenizer, path: Path) -> Path:
    """Write the trained policy to ``path``; with LoRA merged, the adapter (``model.lora_save``), or both."""
    from grpolab.models import save_model
    from grpolab.models.lora import has_lora, merged_copy, save_adapter

    if not has_lora(model):
        return save_model(model, tokenizer, path)
    if cfg.lora_save == "adapter":
        out = save_adapter(model, path, base_model=cfg.path)
        tokenizer.save_pretrained(str(out))
        return out
    out = save_model(merged_copy(model), tokenizer, path)
    if cfg.lora_save == "both":
        save_adapter(model, Path(path) / "adapter", base_model=cfg.path)
    return out


def build_task(cfg: TaskConfig):
    from grpolab.tasks import get_task

    try:
        return get_task(cfg.name, **cfg.options)
    except TypeError as e:
        raise ConfigError(f"task.options for task {cfg.name!r}: {e}") from None
    except (FileNotFoundError, NotADirectoryError, ValueError, ImportError) as e:  # a dataset file, reasoning-gym
        raise ConfigError(f"task {cfg.name!r} (task.options): {e}") from None


def build_task_splits(cfg: TaskConfig, *, seed: int = 0, log: Callable[[str], None] | None = None):
    """``(train_items, eval_items)``: fixed, disjoint, deterministic.

    ``task.n_train`` / ``task.n_eval`` unset: every item of a dataset's split (a generated task:
    4096 / 256). Smaller than a split: its first N items, said once through ``log``. Larger: one
    ConfigError that names each short split's size and the ``--set`` that fits.
    """
    from grpolab.tasks import TooFewItems

    task = build_task(cfg)
    out, problems = {}, []
    for split, key, n in (("train", "task.n_train", cfg.n_train), ("eval", "task.n_eval", cfg.n_eval)):
        try:
            out[split] = task.items(split, n)
        except TooFewItems as e:
            problems.append(f"{key}={n} but the {split} split holds {e.available} items "
                            f"(--set {key}={e.available}, or leave it unset for all rows)")
            continue
        except (FileNotFoundError, NotADirectoryError, ValueError) as e:
            raise ConfigError(f"task {cfg.name!r} (task.options): {e}") from None
        available = getattr(task, "available", None)
        if log is not None and n is not None and callable(available) and available(split) > n:
            log(f"task: using {n} of the {available(split)} {split} items ({key}={n})")
    if problems:
        raise ConfigError(f"task {cfg.name!r}: " + "; ".join(problems))
    train_items, eval_items = out["train"], out["eval"]
    if not train_items:
        raise ConfigError(f"task {cfg.name!r} produced no training items")
    if not eval_items:
        raise ConfigError(f"task {cfg.name!r} produced no held-out items; raise task.n_eval or the "
                          "task's eval_fraction")
    return train_items, eval_items


def warm_start(cfg: Config, model, tokenizer, from_scratch: bool, train_items, eval_items,
               run_dir, *, log: Callable[[str], None] = print, collector=None):
    """Supervised warm start, once per run directory (cached in ``RUN_DIR/sft``).

    The cache is reused only when it was built with the same settings
    (:func:`grpolab.train.rundir.warm_start_key`: model, task, sft section, seed, ...); with
    other settings it is rebuilt. A cache from an older grpolab without a settings record is
    reused as it is (and said so). While it trains, the warm start checkpoints to
    ``RUN_DIR/sft.partial`` (``sft.save_every``); a killed one continues from there when the run
    is started again with the same settings. ``collector``: the run's collector, through which
    the warm start's accuracy checks prompt the model (its prompt format and stop tokens).
    """
    from grpolab.train.rundir import RunDir

    enabled = cfg.sft.enabled == "yes" or (cfg.sft.enabled == "auto" and from_scratch)
    if not enabled:
        return model
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    status, diffs = rd.warm_start_status(cfg)
    if status in ("match", "legacy"):
        from grpolab.models import load_model

        log(f"warm start: reusing {rd.sft}" + (" (no settings record: built by an older grpolab)"
                                               if status == "legacy" else ""))
        cached, _ = load_model(rd.sft, device=next(model.parameters()).device)
        model.load_state_dict(cached.state_dict())
        shutil.rmtree(rd.sft_in_progress, ignore_errors=True)  # left if killed just after sft/ was complete
        return model
    if status == "differs":
        log(f"warm start: {rd.sft} was built with other settings ({'; '.join(diffs[:3])}); rebuilding it")
    elif status == "incomplete":
        log(f"warm start: {rd.sft} has no sft.json record (its writer was interrupted); rebuilding it")
    where = "validation items held out of the training split" if cfg.sft.select_on == "validation" \
        else "held-out items"
    log(f"warm start: supervised training on demonstrations until greedy accuracy on {where} >= "
        f"{cfg.sft.target_accuracy:.2f} (at most {cfg.sft.max_steps} steps)")
    build_warm_start(cfg, model, tokenizer, train_items, eval_items, rd.sft, log=log, collector=collector)
    return model


def build_warm_start(cfg: Config, model, tokenizer, train_items, eval_items, out, *,
                     log: Callable[[str], None] = print, collector=None):
    """Run the warm start (model trained in place) and write it to ``out`` with its ``sft.json``.

    ``grpolab sft --out OUT`` and ``grpolab train`` (``RUN_DIR/sft``) both come here. Progress is
    checkpointed to the sibling ``OUT.partial`` (:class:`grpolab.train.rundir.WarmStartCheckpoint`)
    and resumed from there by a later call with the same settings; it is removed once ``out``
    and its record are complete. Returns ``(final_path, SFTResult)``.
    """
    from grpolab.models import save_model
    from grpolab.train.rundir import WarmStartCheckpoint

    checkpoint = WarmStartCheckpoint(out, cfg, log=log)
    result = sft_from_config(cfg, model, tokenizer, train_items, eval_items, log=log, checkpoint=checkpoint,
                             collector=collector)
    t0 = time.time()
    saved = save_model(model, tokenizer, out)
    write_sft_record(saved, cfg, result, result.seconds + time.time() - t0)
    checkpoint.remove()
    return saved, result


def sft_from_config(cfg: Config, model, tokenizer, train_items, eval_items, *,
                    log: Callable[[str], None] = print, checkpoint=None, collector=None):
    """Run the supervised warm start with the ``sft`` section of ``cfg`` (model trained in place).

    ``checkpoint``: where to keep and find its in-progress checkpoint
    (:class:`grpolab.train.rundir.WarmStartCheckpoint`); None: no checkpoints. ``collector``: the
    run's collector for the accuracy checks (:func:`grpolab.train.sft.run_sft`)."""
    from grpolab.train.sft import run_sft

    demos, select_items = sft_selection_split(cfg, train_items, eval_items)
    return run_sft(
        model, tokenizer, demos, select_items, max_steps=cfg.sft.max_steps,
        batch_size=cfg.sft.batch_size, lr=cfg.sft.lr, target_accuracy=cfg.sft.target_accuracy,
        eval_every=cfg.sft.eval_every, max_new_tokens=cfg.rollout.max_new_tokens,
        schedule=cfg.sft.schedule, ema=cfg.sft.ema,
        seed=cfg.trainer.seed, log=log, env=cfg.env,
        privileged_share=cfg.sft.privileged_share, teacher_template=cfg.credit.template,
        checkpoint=checkpoint, collector=collector,
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
        "seconds": seconds, "resumed_from": result.resumed_from,
        "sft_config": dataclasses.asdict(cfg.sft), "key": warm_start_key(cfg),
    })


def uses_sandbox(cfg: Config, items) -> bool:
    """Whether this run executes untrusted code: a ``code`` reward, a python tool, or the
    calculator's ``sandbox`` backend."""
    if any(it.reward == "code" for it in items):
        return True
    if not cfg.env.name:
        return False
    tools = set(cfg.env.options.get("tools", ()))
    if cfg.env.name == "tools" and "tools" not in cfg.env.options:
        tools.add("python")  # the "tools" env offers every tool by default
    tools |= {t for it in items for t in it.meta.get("tools", ()) or ()}
    return "python" in tools or cfg.env.options.get("calc_backend") == "sandbox"


def record_sandbox_isolation(cfg: Config, items, run_dir: Path, *, log: Callable[[str], None] = print):
    """Probe the sandbox once, log what isolation is in force and write ``RUN_DIR/sandbox.json``.

    Returns the :class:`~grpolab.rewards.SandboxIsolation`, or ``None`` when the run executes no
    untrusted code. Degraded isolation is a loud warning, and an error when
    ``GRPOLAB_REQUIRE_SANDBOX=1`` (see docs/rewards.md).
    """
    if not uses_sandbox(cfg, items):
        return None
    import json
    import warnings

    from grpolab.rewards import isolation_required, sandbox_isolation
    from grpolab.utils.io import atomic_write_text

    iso = sandbox_isolation()
    atomic_write_text(Path(run_dir) / "sandbox.json", json.dumps(iso.as_dict(), indent=2) + "\n")
    log(iso.description)
    if iso.degraded:
        warnings.warn(iso.description, RuntimeWarning, stacklevel=2)
        if isolation_required():
            raise ConfigError(f"{iso.description} (GRPOLAB_REQUIRE_SANDBOX is set: unset it to train anyway)")
    return iso
