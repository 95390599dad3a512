"""Load and save any Hugging Face causal LM + tokenizer from/to a local directory (or a GGUF file).

Nothing here reaches the network: ``load_model`` takes a directory that already holds a model in
the standard HF layout (``config.json``, ``model.safetensors`` or sharded/``.bin`` weights, and
tokenizer files). ``save_model`` writes that same layout (safetensors) atomically, so a reader
never sees a half-written checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from grpolab.models.dtypes import resolve_dtype as _resolve_dtype

__all__ = ["load_adapter", "load_lora_checkpoint", "load_model", "load_weights_into", "save_model", "stop_token_ids",
           "WEIGHT_FILES", "TOKENIZER_FILES"]

#: Any one of these marks a directory as holding model weights.
WEIGHT_FILES: tuple[str, ...] = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
#: Any one of these marks a directory as holding a tokenizer.
TOKENIZER_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
)

def _check_model_dir(path: Path) -> None:
    if not path.exists():
        raise FileNotFoundError(
            f"model path {str(path)!r} does not exist; pass a local directory written by "
            "save_model() or save_pretrained() (grpolab never downloads models)"
        )
    if not path.is_dir():
        raise NotADirectoryError(
            f"model path {str(path)!r} is a file, not a directory or a .gguf file; pass the directory "
            "that holds config.json and the weights, or a GGUF file"
        )
    present = sorted(p.name for p in path.iterdir())
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{str(path)!r} is not a Hugging Face model directory: config.json is missing "
            f"(found: {present or 'nothing'})"
        )
    _check_causal_lm(path / "config.json")
    if not any((path / f).is_file() for f in WEIGHT_FILES):
        raise FileNotFoundError(
            f"{str(path)!r} has config.json but no weights: expected one of {list(WEIGHT_FILES)} "
            f"(found: {present})"
        )
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{str(path)!r} has no tokenizer: expected one of {list(TOKENIZER_FILES)} "
            f"(found: {present}); save the tokenizer next to the model "
            "(tokenizer.save_pretrained(path) or grpolab.models.save_model)"
        )


#: architecture names of models that generate text left to right (``architectures`` in config.json)
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def _check_causal_lm(config_json: Path) -> None:
    """Refuse (ValueError) a model whose config.json names only architectures that are not causal
    language models (a BERT ``BertForMaskedLM``, a classifier): grpolab samples text token by token
    and would train a masked-LM head as if it were one. A config without ``architectures`` is trusted."""
    import json

    try:
        archs = json.loads(config_json.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return  # transformers names an unreadable config.json itself
    if archs and not any(str(a).endswith(CAUSAL_LM_SUFFIXES) for a in archs):
        raise ValueError(
            f"{str(config_json.parent)!r} is a {', '.join(map(str, archs))}, not a causal language model "
            f"(an architecture ending in {' / '.join(CAUSAL_LM_SUFFIXES)}): grpolab trains models that write "
            "their answer token by token; pick a decoder model such as SmolLM2 or Qwen2.5")


def load_model(path, *, dtype="auto", device="cpu", attn_implementation: str | None = None,
               gradient_checkpointing: bool = False):
    """Load ``(model, tokenizer)`` from a local HF directory or a GGUF file.

    Args:
        path: directory with ``config.json``, weights (one of :data:`WEIGHT_FILES`) and
            tokenizer files (one of :data:`TOKENIZER_FILES`); or a ``.gguf`` file, or a folder
            holding one and no ``config.json`` (:func:`grpolab.models.gguf.load_gguf`:
            dequantised, ``dtype="auto"`` means float32; needs ``grpolab[gguf]``); or a LoRA
            adapter directory (``model.lora_save: adapter``; :func:`load_adapter`:
            its base model with the adapter merged in).
        dtype: ``"auto"`` (default; ``None`` means the same) keeps the dtype the checkpoint was
            saved in (its config's ``torch_dtype``: a bf16 checkpoint loads as bf16); else a
            ``torch.dtype`` or one of "float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16",
            "float64".
        device: where to put the model ("cpu", "cuda", "cuda:1", a ``torch.device``).
        attn_implementation: passed to ``from_pretrained`` (``"sdpa"``, ``"eager"``,
            ``"flash_attention_2"``, ...); None/"" = transformers' default.
        gradient_checkpointing: enable activation checkpointing (non-reentrant) for training.

    Returns:
        ``(model, tokenizer)``: an ``AutoModelForCausalLM`` in eval mode and an
        ``AutoTokenizer``. The model's generation stops on :func:`stop_token_ids`.

    Pad token: batching needs one. If the tokenizer has none, its EOS token is used as pad
    (``tokenizer.pad_token = tokenizer.eos_token``) -- the usual convention for decoder-only
    models; padded positions are masked out, so sharing the id is harmless. If the tokenizer has
    neither, a ValueError says so. ``model.config.pad_token_id`` is set to match when unset.

    Raises:
        FileNotFoundError / NotADirectoryError: the path is missing, or is not a model directory
            (the message names the path and the missing file).
        ValueError: an unknown dtype or attention implementation.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    from grpolab.models.gguf import find_gguf, load_gguf

    gguf = find_gguf(path)
    if gguf is not None:  # a .gguf file or a folder holding one: dequantised through transformers
        model, tokenizer = load_gguf(gguf, dtype=dtype, device=device, attn_implementation=attn_implementation)
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        return model, tokenizer
    from grpolab.models.lora import is_adapter_dir

    if is_adapter_dir(path):  # model.lora_save: adapter -- the base it names, with the adapter merged in
        model, tokenizer = load_adapter(path, dtype=dtype, device=device, attn_implementation=attn_implementation)
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        return model, tokenizer
    _check_model_dir(path)
    torch_dtype = _resolve_dtype(dtype)

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(
                f"tokenizer at {str(path)!r} has neither a pad nor an eos token; set "
                "tokenizer.pad_token and save it again"
            )
        tokenizer.pad_token = tokenizer.eos_token

    kwargs = {"dtype": torch_dtype if torch_dtype is not None else "auto"}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    from grpolab.models.lora import LORA_CHECKPOINT_FILE, holds_injected_lora

    if (path / LORA_CHECKPOINT_FILE).is_file():  # a LoRA run's training checkpoint: adapters merged
        model = load_lora_checkpoint(path, dtype=torch_dtype, device=device)
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tokenizer.pad_token_id
        if gradient_checkpointing:
            enable_gradient_checkpointing(model)
        return model, tokenizer
    if holds_injected_lora(path):
        raise ValueError(f"{str(path)!r} holds the weights of a model with LoRA layers injected (a training "
                         f"checkpoint written before {LORA_CHECKPOINT_FILE} was recorded) and no settings to rebuild "
                         "it; continue the run with `grpolab train --resume RUN_DIR`, or evaluate its final/")
    try:
        model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    except (ValueError, ImportError) as e:
        if attn_implementation and "attn" in str(e).lower():
            raise ValueError(f"model.attn_implementation={attn_implementation!r} is not available for "
                             f"{str(path)!r}: {e}") from None
        raise
    model.to(device)
    model.eval()
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model, tokenizer


def enable_gradient_checkpointing(model) -> None:
    """Recompute each block's activations in the backward pass (non-reentrant checkpointing)."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(model).__name__} does not support gradient checkpointing; "
                         "set model.gradient_checkpointing=false")
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:  # pragma: no cover - older transformers
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(model, "enable_input_require_grads"):
        model.enable_input_require_grads()  # LoRA: frozen embeddings still let gradients reach the blocks


def stop_token_ids(model, tokenizer) -> list[int]:
    """Every token id that ends a response: the tokenizer's EOS and ``generation_config.eos_token_id``.

    Instruct models often end a turn with a token that is not the tokenizer's EOS (Qwen2.5's
    ``<|im_end|>`` next to ``<|endoftext|>``, Llama-3's ``<|eot_id|>``); their
    ``generation_config.json`` lists them all. Order: the tokenizer's first, then the rest,
    without repeats.
    """
    ids: list[int] = []

    def add(x):
        if x is None:
            return
        for i in ([x] if isinstance(x, int) else list(x)):
            if isinstance(i, int) and i not in ids:
                ids.append(i)

    add(getattr(tokenizer, "eos_token_id", None))
    gen = getattr(model, "generation_config", None)
    add(getattr(gen, "eos_token_id", None) if gen is not None else None)
    return ids


def save_model(model, tokenizer, path) -> Path:
    """Write ``model`` and ``tokenizer`` to ``path`` in standard HF format (safetensors).

    Atomic replace: everything is written to a fresh temporary directory next to ``path`` (same
    filesystem), then renamed into place. An existing ``path`` directory is first renamed aside
    and deleted only after the new one is in place; on any error the temporary directory is
    removed and an existing ``path`` is left (or put back) as it was. Readers therefore see the
    old checkpoint or the new one, never a mix. (The swap is two renames, so there is an instant
    where ``path`` does not exist; a reader that races it gets FileNotFoundError, not bad data.)

    Returns:
        the final path.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(
            f"cannot save model to {str(path)!r}: a file with that name exists; pass a directory "
            "path or remove the file"
        )
    parent = path.parent if str(path.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=parent))
    old = None
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        if (
            not (tmp / "model.safetensors").exists()
            and not (tmp / "model.safetensors.index.json").exists()
        ):
            raise RuntimeError(
                f"save_pretrained wrote no safetensors weights into {str(tmp)!r}; "
                "is this a transformers PreTrainedModel?"
            )
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=parent))
            os.rmdir(old)
            os.replace(path, old)
        try:
            os.replace(tmp, path)
        except BaseException:
            if old is not None:
                os.replace(old, path)
                old = None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def load_adapter(path: str | Path, *, base: str | Path | None = None, **load_kwargs):
    """``(model, tokenizer)``: the base model named by an adapter directory with the adapter merged in.

    ``path``: a directory :func:`save_adapter` wrote (``adapter_config.json`` +
    ``adapter_model.safetensors``; the tokenizer next to them, as ``RUN_DIR/final`` holds it).
    ``base``: the base model directory; default: the config's ``base_model_name_or_path`` (as the
    training config gave it: a relative path is tried from the working directory, then from the
    adapter's parent folders). ``load_kwargs`` go to :func:`grpolab.models.load_model` (dtype,
    device, ...). The result is a plain model (no peft layers): for evaluation and measurement.

    Raises:
        FileNotFoundError: the adapter weights or the base model cannot be found (the message names
            the path tried and how to pass one).
    """
    from safetensors.torch import load_file

    from grpolab.models.lora import DEFAULT_TARGETS, LoraSettings, apply_lora, merged_copy

    path = Path(path)
    cfg = json.loads((path / "adapter_config.json").read_text())
    weights = path / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"{str(path)!r} has adapter_config.json but no adapter_model.safetensors")
    base_dir = _find_base(path, base if base is not None else cfg.get("base_model_name_or_path"))
    model, _ = load_model(base_dir, **load_kwargs)
    targets = cfg.get("target_modules") or list(DEFAULT_TARGETS)
    settings = LoraSettings(r=int(cfg["r"]), alpha=float(cfg.get("lora_alpha", 2 * cfg["r"])),
                            dropout=float(cfg.get("lora_dropout") or 0.0),
                            target_modules=targets if isinstance(targets, str) else tuple(targets))
    apply_lora(model, settings)
    prefix = "base_model.model."
    state = {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in load_file(str(weights)).items()}
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise ValueError(f"adapter {str(path)!r} does not fit its base {str(base_dir)!r}: unexpected {missing[:3]}")
    merged = merged_copy(model)
    merged.eval()
    tok_src = path if any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")) else base_dir
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tok_src))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return merged, tokenizer


def _find_base(adapter: Path, base: str | Path | None) -> Path:
    if not base:
        raise FileNotFoundError(f"adapter {str(adapter)!r} does not name its base model (base_model_name_or_path); "
                                "load it with grpolab.models.io.load_adapter(path, base=BASE_DIR)")
    base = Path(base)
    tried = [base] if base.is_absolute() else [base, *(p / base for p in adapter.resolve().parents)]
    for cand in tried:
        if cand.exists():
            return cand
    raise FileNotFoundError(f"adapter {str(adapter)!r}: its base model {str(base)!r} was not found (tried "
                            f"{[str(t) for t in tried[:3]]}...); run from the folder the training ran in, or "
                            "load it with grpolab.models.io.load_adapter(path, base=BASE_DIR)")


def load_weights_into(model, model_dir: str | Path) -> None:
    """Copy the safetensors weights saved in ``model_dir`` into ``model`` in place, one tensor at a
    time: the same result as ``model.load_state_dict(load_weights(model_dir, model))`` without a
    second full copy of the weights in memory (resuming a 538 MB model cost 1 GB of peak RSS and
    kept 0.5 GB of freed heap resident for the rest of the run).

    Raises:
        RuntimeError: a saved tensor the model does not have, a shape that differs, or a missing
            parameter other than a tied LM head (saved once, as the embedding).
    """
    from safetensors import safe_open

    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise RuntimeError(f"no *.safetensors file in {model_dir}")
    target = model.state_dict()  # detached views of the live parameters and buffers
    seen: set[str] = set()
    with torch.no_grad():
        for f in files:
            with safe_open(str(f), framework="pt", device="cpu") as fh:
                for k in fh.keys():
                    if k not in target:
                        raise RuntimeError(f"checkpoint {model_dir} holds {k!r}, which the model does not have")
                    t = fh.get_tensor(k)
                    if tuple(t.shape) != tuple(target[k].shape):
                        raise RuntimeError(f"checkpoint {model_dir}: {k} has shape {tuple(t.shape)}, "
                                           f"the model's is {tuple(target[k].shape)}")
                    target[k].copy_(t)
                    seen.add(k)
                    del t
    missing = set(target) - seen
    if missing and not all("lm_head" in k for k in missing):
        raise RuntimeError(f"checkpoint {model_dir} lacks parameters: {sorted(missing)[:5]} ...")


def load_lora_checkpoint(path: str | Path, *, dtype=None, device="cpu"):
    """A training checkpoint's model (``checkpoints/step_N/model`` of a LoRA run) with its adapters merged.

    ``path`` holds ``config.json``, the weights of the adapted model (base layers and adapters) and
    :data:`LORA_CHECKPOINT_FILE`. The model is built from its config, adapted with those settings,
    filled with the saved tensors one at a time (:func:`load_weights_into`) and merged.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    from grpolab.models.lora import LORA_CHECKPOINT_FILE, LoraSettings, apply_lora, merged_copy

    path = Path(path)
    settings = LoraSettings.from_dict(json.loads((path / LORA_CHECKPOINT_FILE).read_text()))
    config = AutoConfig.from_pretrained(str(path))
    if not isinstance(dtype, torch.dtype):  # None / "auto": the dtype the checkpoint was saved in
        saved = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
        if isinstance(saved, str):
            saved = getattr(torch, saved, None)
        dtype = saved if isinstance(saved, torch.dtype) else None
    model = AutoModelForCausalLM.from_config(config, **({"dtype": dtype} if dtype is not None else {}))
    apply_lora(model, settings)
    load_weights_into(model, path)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    merged = merged_copy(model).to(device)
    merged.eval()
    return merged
