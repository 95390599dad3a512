"""What ``grpolab train`` checks before any work, and ``grpolab train --dry-run`` runs alone.

:func:`check_train` is one function so that the two cannot drift apart: every refusal the
trainer would give for the config, the data, the model, the prompts or the run directory is
given here, before a model is trained (or, for a dry run, before anything is written).
:func:`check_writable` is the output check every command runs before its work.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from grpolab.config import Config, ConfigError

__all__ = ["check_disk_space", "check_sft_disk_space", "check_train", "check_writable", "tokenizer_and_context",
           "weight_bytes"]


def check_writable(path: str | os.PathLike, what: str, *, directory: bool = False) -> Path:
    """Refuse (:class:`ConfigError`) an output ``path`` that cannot be written: a file in the way of
    a directory (``directory=True``), a directory in the way of a file, or a nearest existing
    parent that is not a writable directory. Nothing is created. Returns ``Path(path)``."""
    p = Path(path)
    if p.exists():
        if directory and not p.is_dir():
            raise ConfigError(f"{what} {str(p)!r} is a file, not a directory; pick another path")
        if not directory and p.is_dir():
            raise ConfigError(f"{what} {str(p)!r} is a directory; give a file path")
        if not os.access(p if p.is_dir() else p.parent, os.W_OK):
            raise ConfigError(f"{what} {str(p)!r} is not writable; pick another path")
        return p
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{what} {str(p)!r} cannot be created: {str(parent)!r} is a file; pick another path")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {str(p)!r} cannot be created: {str(parent)!r} is not writable; "
                          "pick another path")
    return p


def tokenizer_and_context(cfg: Config):
    """``(tokenizer, context)`` of the configured model without loading its weights: a Hugging Face
    directory's tokenizer files and config.json, or the tiny model's tokenizer and context. For a
    GGUF file (checked for truncation) or a LoRA adapter directory, whose tokenizer comes only with
    the whole model, ``(None, None)``: the trainer checks their prompts once the model has loaded,
    still before any work. Raises :class:`ConfigError` for a path that is no model."""
    from grpolab.models.gguf import check_gguf_file, find_gguf
    from grpolab.models.lora import is_adapter_dir

    m = cfg.model
    if not m.path:  # the tiny model: its tokenizer and its configured context, no weights built
        from grpolab.models import PRINTABLE_ALPHABET, TinyModelConfig, build_tokenizer

        tok = build_tokenizer(PRINTABLE_ALPHABET if m.tokenizer_alphabet == "printable" else None)
        return tok, TinyModelConfig().max_position_embeddings
    path = Path(m.path)
    try:
        gguf = find_gguf(path)
        if gguf is not None:
            check_gguf_file(gguf.path)
            return None, None
        if is_adapter_dir(path):
            return None, None
        import json

        from grpolab.models.io import _check_model_dir

        _check_model_dir(path)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(path))
        context = json.loads((path / "config.json").read_text()).get("max_position_embeddings")
    except ConfigError:
        raise
    except (OSError, ValueError) as e:
        raise ConfigError(f"model.path={m.path!r}: {' '.join(str(e).split())}") from None
    return tok, context if isinstance(context, int) and context > 0 else None


def check_train(cfg: Config, *, resume: bool = False, overwrite: bool = False,
                log: Callable[[str], None] | None = None) -> None:
    """Every check ``grpolab train`` runs before its work: the run directory (occupied without
    ``--overwrite``, not writable), the device, LoRA's package, the task's data and its size, the
    model's files and tokenizer, and every prompt against the prompt limit. Raises
    :class:`ConfigError` (or its :class:`~grpolab.train.rundir.RunDirError`) for the first problem."""
    from grpolab.train.rundir import RunDir, RunDirError
    from grpolab.train.setup import (build_task_splits, check_head_size, refuse_float16, resolve_device,
                                     resolve_prompt_format)

    quiet = log if log is not None else (lambda _s: None)
    run = RunDir(cfg.trainer.run_dir)
    if not resume:
        run.check_owner()  # a user's folder: never written into, never deleted by --overwrite
    run.check_free()  # another process trains there
    if not resume and not overwrite and (run.latest_checkpoint() is not None or (run.final / "config.json").exists()):
        raise RunDirError(
            f"{run.path} already holds a run. Continue it with `grpolab train --resume {run.path}`, start "
            f"over with --overwrite (keeps the cached warm start if it was built with the same settings), "
            f"or pick another directory with --set trainer.run_dir=PATH")
    check_writable(run.path, "trainer.run_dir", directory=True)
    ckpt = run.latest_checkpoint() if resume else None
    if ckpt is not None:
        from grpolab.train.loop import check_resume_steps

        check_resume_steps(cfg, ckpt.step, run)
    resolve_device(cfg.model.device)
    refuse_float16(cfg.model)
    check_head_size(cfg.model)
    if cfg.model.lora:
        from grpolab.models.lora import require_peft

        try:
            require_peft()
        except ImportError as e:
            raise ConfigError(str(e)) from None
    train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed, log=quiet)
    if len(train_items) < cfg.rollout.prompts_per_step:
        raise ConfigError(f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} exceeds the task's "
                          f"{len(train_items)} training items; lower it (--set rollout.prompts_per_step=N)")
    warm = cfg.sft.enabled == "yes" or (cfg.sft.enabled == "auto" and not cfg.model.path)
    if warm and not resume and not any(it.demonstration for it in train_items):
        from grpolab.train.warm_start import warm_start_status

        if warm_start_status(run.sft, cfg)[0] not in ("match", "legacy"):  # a cached warm start needs none
            raise ConfigError("supervised warm start needs task items with a demonstration; this task has none "
                              "(set sft.enabled=no, or start from a model that already solves some items)")
    tok, context = tokenizer_and_context(cfg)
    if tok is not None:
        resolve_prompt_format(cfg, tok, list(train_items) + list(eval_items), log=quiet, context=context)
    check_disk_space(cfg, tok, resumed=ckpt is not None)
    dims = model_dims(cfg, tok)
    if dims is not None:
        from grpolab.train.memory_check import check_memory

        check_memory(cfg, dims, n_demos=sum(1 for it in train_items if it.demonstration),
                     device=str(resolve_device(cfg.model.device)))


def check_disk_space(cfg: Config, tokenizer=None, *, resumed: bool = False) -> None:
    """The free space of ``trainer.run_dir`` against the checkpoints' size
    (:func:`grpolab.train.diskspace.check_free_space`), from the weight files' sizes (the tiny
    model: its parameters) without loading a model. The trainer checks again with the loaded model."""
    from grpolab.train.diskspace import check_free_space, checkpoint_bytes

    weights = weight_bytes(cfg, tokenizer)
    keep = cfg.trainer.keep_checkpoints
    need = checkpoint_bytes(weights, 0 if cfg.model.lora else weights, keep=0 if resumed else keep)  # resumed: on disk
    check_free_space(cfg.trainer.run_dir, need, keep=keep)


def check_sft_disk_space(cfg: Config, out: str | os.PathLike, tokenizer=None) -> None:
    """``grpolab sft --out OUT``'s disk check before any work
    (:func:`grpolab.train.diskspace.check_warm_start_space`), sized like :func:`check_disk_space`."""
    from grpolab.train.diskspace import check_warm_start_space

    weights = weight_bytes(cfg, tokenizer)
    every = cfg.sft.snapshot_every
    check_warm_start_space(out, weights, weights, snapshots=cfg.sft.max_steps // every if every else 0)


def weight_bytes(cfg: Config, tokenizer=None) -> int:
    """Bytes of the configured model's weights without loading it: its weight files' sizes, or the
    tiny model's parameters (built at ``model.hidden_size`` etc. with ``tokenizer``)."""
    m = cfg.model
    if m.path:
        path = Path(m.path)
        files = [path] if path.is_file() else [f for f in path.glob("*") if f.suffix in (".safetensors", ".bin", ".gguf")]
        return sum(f.stat().st_size for f in files)
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    tiny = TinyModelConfig(hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
                           num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size)
    model = build_tiny_model(tokenizer if tokenizer is not None else build_tokenizer(), tiny, seed=0)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def model_dims(cfg: Config, tokenizer=None):
    """The configured model's :class:`~grpolab.train.memory_check.ModelDims` without loading its
    weights (config.json, or the tiny model's settings); None when they cannot be read (GGUF)."""
    import json

    from grpolab.train.memory_check import ModelDims

    m = cfg.model
    elt = {"float16": 2, "bfloat16": 2}.get(m.dtype, 4)
    if not m.path:
        from grpolab.models import TinyModelConfig

        tiny = TinyModelConfig(hidden_size=m.hidden_size, num_hidden_layers=m.num_layers,
                               num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size)
        dims = ModelDims.from_config(tiny, elt)
        return ModelDims(dims.hidden, dims.layers, dims.kv_width, len(tokenizer) if tokenizer is not None else 0, elt)
    config = Path(m.path) / "config.json"
    try:
        return ModelDims.from_config(json.loads(config.read_text()), elt)
    except (OSError, ValueError, TypeError):
        return None
