"""Building what a run needs from its config: device, policy, task splits, prompt format, final save.

The warm start has its own module, :mod:`grpolab.train.warm_start`."""

from __future__ import annotations

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


def check_head_size(cfg: ModelConfig) -> None:
    """The tiny model's head size (``hidden_size / num_heads``) must be even: rotary position
    embeddings rotate pairs of dimensions (an odd one failed inside the first forward)."""
    head = cfg.hidden_size // cfg.num_heads
    if not cfg.path and head % 2:
        raise ConfigError(
            f"model.hidden_size / model.num_heads = {cfg.hidden_size} / {cfg.num_heads} = {head}: the tiny model's "
            "head size must be even (rotary position embeddings rotate pairs of dimensions); change "
            "model.hidden_size or model.num_heads")


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
        except Exception as e:  # a corrupt or truncated weights file (safetensors' own error type)
            if type(e).__name__ != "SafetensorError":
                raise
            raise ConfigError(f"model.path={cfg.path!r}: its weights file cannot be read ({e}); the file is "
                              "corrupt or truncated: save or copy the model again") from None
        return model, tokenizer, False
    check_head_size(cfg)
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


FLOAT16_FIX = ("set model.dtype=float32, or bfloat16 for half the memory (float16 is fine for `grpolab eval`, "
               "which takes no optimizer step)")


def refuse_float16(cfg: ModelConfig) -> None:
    """``model.dtype=float16`` cannot be trained: AdamW's update of float16 weights under- and
    overflows (its epsilon, 1e-8, is 0 in float16), and every weight is NaN after the first
    optimizer step, on a CPU or a GPU. grpolab keeps no float32 master copy, so it refuses
    (:class:`ConfigError`) rather than train a model it would destroy."""
    if cfg.dtype == "float16":
        raise ConfigError("model.dtype=float16 cannot be trained: an optimizer step on float16 weights turns them "
                          f"into NaN (AdamW's epsilon 1e-8 is 0 in float16); {FLOAT16_FIX}")


def trainable_dtype(cfg: ModelConfig, model, log: Callable[[str], None] = print):
    """The policy in a dtype an optimizer can step: a float16 checkpoint loaded with
    ``model.dtype=auto`` is trained in float32 (and says so); an explicit float16 is refused
    (:func:`refuse_float16`)."""
    refuse_float16(cfg)
    param = next(iter(model.parameters()), None)
    if param is not None and param.dtype == torch.float16:
        log(f"model.path={cfg.path} holds float16 weights, which an optimizer step turns into NaN: training in "
            "float32 (model.dtype=bfloat16 halves the memory)")
        model = model.float()
    return model


def prepare_policy(cfg: ModelConfig, model):
    """Add the configured LoRA adapters (``model.lora``) to the policy in place and route its SwiGLU
    MLPs through the activation-lean product (:func:`grpolab.models.memory.lean_swiglu`: the same
    function, one saved tensor fewer per token and layer); returns it."""
    from grpolab.models.memory import lean_swiglu

    if cfg.lora:
        from grpolab.models.lora import apply_lora

        try:
            apply_lora(model, cfg.lora)
        except (ValueError, ImportError) as e:
            raise ConfigError(f"model.lora: {e}") from None
    lean_swiglu(model)
    return model


def model_context(model) -> int | None:
    """The longest sequence ``model`` is made for (``config.max_position_embeddings``; None = unknown)."""
    n = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return int(n) if isinstance(n, int) and n > 0 else None


def longest_token_chars(tokenizer) -> int:
    """The most characters one token of ``tokenizer`` stands for (its longest vocabulary entry; 64 when
    the vocabulary cannot be read)."""
    try:
        vocab = tokenizer.get_vocab()
        return max(1, max(len(str(t)) for t in vocab))
    except Exception:  # noqa: BLE001 - a tokenizer without a readable vocabulary: a generous bound
        return 64


#: how many times the characters ``limit`` tokens can hold a prompt may have before it is refused
#: untokenized: below it ``rollout.prompt_truncation=left/right`` cuts prompts as usual
PROMPT_CHAR_MARGIN = 16


def check_prompt_chars(items, limit: int, tokenizer, *, task: str) -> None:
    """Refuse (:class:`ConfigError`) a prompt with more than :data:`PROMPT_CHAR_MARGIN` times the
    characters ``limit`` tokens can hold (``limit`` x the longest token), before it is tokenized: a
    20 MB prompt aborted inside the Rust tokenizer (SIGABRT) before the token check could speak.
    No check without a limit (``limit=0``)."""
    if not limit:
        return
    bound = PROMPT_CHAR_MARGIN * limit * longest_token_chars(tokenizer)
    for i, it in enumerate(items):
        n = len(it.prompt) + sum(len(str(m.get("content", ""))) for m in (getattr(it, "messages", None) or [])
                                 if isinstance(m, dict))
        if n > bound:
            meta = getattr(it, "meta", None) or {}
            where = f"row {meta['row']} of {meta['source']}" if "row" in meta and "source" in meta else f"item {i}"
            raise ConfigError(
                f"task {task!r}: the prompt of {where} ({it.prompt[:40]!r}...) has {n:,} characters, more than "
                f"{PROMPT_CHAR_MARGIN} times what the prompt limit of {limit} tokens can hold ({bound:,} characters), "
                "so it is not tokenized; shorten or drop it")


def resolve_prompt_format(cfg: Config, tokenizer, items, *, log: Callable[[str], None] = print,
                          context: int | None = None):
    """The run's :class:`grpolab.tasks.PromptFormat` with ``chat_template`` decided and the prompt
    limit set, after checking that every item's prompt encodes (the tiny tokenizer refuses text it
    cannot encode: the error names the item) and fits: ``rollout.max_prompt_tokens``, never above
    the model's ``context`` (``max_position_embeddings``) less ``rollout.max_new_tokens``
    (:func:`grpolab.rollout.prompts.prompt_limit`). With ``rollout.prompt_truncation=error`` a
    longer prompt is a :class:`ConfigError` naming the item, its length and the fixes; with
    ``left``/``right`` one line says how many prompts are cut. Logs one line saying which format
    the run uses (:func:`prompt_format_line`)."""
    import dataclasses

    from grpolab.rollout.prompts import prompt_limit

    ro = cfg.rollout
    try:
        fmt = cfg.task.prompt_format().resolve(tokenizer)
        # episodes (env.name) are prompted by their environment, not through this format: no limit here
        limit = 0 if cfg.env.name else prompt_limit(ro.max_prompt_tokens, ro.max_new_tokens, context)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    check_prompt_chars(items, limit, tokenizer, task=cfg.task.name)  # before any tokenizer sees a huge prompt
    lengths = []
    for i, it in enumerate(items):
        try:
            lengths.append(len(fmt.encode([it], tokenizer)[0]))
        except ValueError as e:
            raise ConfigError(f"task {cfg.task.name!r}, prompt of item {i} ({it.prompt[:40]!r}...): {e}") from None
    room = f"the model's context of {context} tokens less rollout.max_new_tokens={ro.max_new_tokens}"
    if ro.max_prompt_tokens and limit == ro.max_prompt_tokens:
        what = f"rollout.max_prompt_tokens={limit}"
    elif ro.max_prompt_tokens:
        what = f"{limit}: rollout.max_prompt_tokens={ro.max_prompt_tokens} capped at {room}"
    else:
        what = f"{limit}: {room}"
    long = [i for i, n in enumerate(lengths) if limit and n > limit]
    if long and ro.prompt_truncation == "error":
        i = max(long, key=lambda j: lengths[j])
        meta = getattr(items[i], "meta", None) or {}
        where = f"row {meta['row']} of {meta['source']}" if "row" in meta and "source" in meta else f"item {i}"
        raise ConfigError(
            f"task {cfg.task.name!r}: {len(long)} of {len(items)} prompts are longer than the limit, the longest "
            f"{where} ({items[i].prompt[:40]!r}...) with {lengths[i]} tokens; the limit is {what}. Shorten or "
            f"drop those rows, raise rollout.max_prompt_tokens (a long prompt costs memory in every sample of "
            f"its group), or set rollout.prompt_truncation=left (keep each prompt's last tokens) or right")
    if long:
        log(f"prompts: {len(long)} of {len(items)} longer than {limit} tokens are cut "
            f"(rollout.prompt_truncation={ro.prompt_truncation}: their {'last' if ro.prompt_truncation == 'left' else 'first'} "
            f"{limit} tokens are kept)")
    fmt = dataclasses.replace(fmt, max_prompt_tokens=limit, truncation=ro.prompt_truncation)
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
    """Write the trained policy to ``path``; with LoRA merged, the adapter (``model.lora_save``), or both.
    A model holding NaN or infinity is never written (:class:`~grpolab.train.nonfinite.NonFiniteError`)."""
    from grpolab.models import save_model
    from grpolab.models.lora import has_lora, merged_copy, save_adapter
    from grpolab.train.nonfinite import require_finite_model

    require_finite_model(model, f"final weights ({path} was not written)")

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
        except RuntimeError as e:  # a generated task whose prompt space holds fewer distinct prompts
            if "prompt space" not in str(e):
                raise
            raise ConfigError(f"{key}={n}: {e}") from None
        available = getattr(task, "available", None)
        if log is not None and n is not None and callable(available) and available(split) > n:
            log(f"task: using {n} of the {available(split)} {split} items ({key}={n})")
    if problems:
        raise ConfigError(f"task {cfg.name!r}: " + "; ".join(problems))
    _say_skipped_rows(task, cfg, log)
    train_items, eval_items = out["train"], out["eval"]
    if not train_items:
        raise ConfigError(f"task {cfg.name!r} produced no training items")
    if not eval_items:
        raise ConfigError(f"task {cfg.name!r} produced no held-out items; raise task.n_eval or the "
                          "task's eval_fraction")
    return train_items, eval_items


def _say_skipped_rows(task, cfg: TaskConfig, log: Callable[[str], None] | None) -> None:
    """With ``task.options.on_bad_row=skip``: how many rows of each file were skipped, and which."""
    if log is None:
        return
    for attr, key in (("skipped_rows", "path"), ("skipped_eval_rows", "eval_path")):
        rows = getattr(task, attr, None) or []
        if rows:
            shown = ", ".join(str(r) for r in rows[:10]) + (", ..." if len(rows) > 10 else "")
            log(f"task: skipped {len(rows)} bad row(s) of {cfg.options.get(key)} (on_bad_row=skip; rows {shown}); "
                "on_bad_row=raise names the first one's problem")


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
