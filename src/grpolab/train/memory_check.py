"""Memory-sized settings checked against the machine before the warm start and step 0.

``rollout.group_size=20000`` or ``sft.batch_size=200000`` used to fail in the allocator after the
model had loaded and the warm start had run. :func:`check_memory` compares a *lower bound* of what
the largest batches of the run hold at once with the memory available now (``MemAvailable`` on
CPU, the free memory of the GPU) and refuses a setting that cannot fit, naming it:

- sampling: ``rollout.prompts_per_step x rollout.group_size`` rows, each holding the key/value
  cache of ``rollout.max_new_tokens`` tokens (``2 x layers x kv_width`` values per token) and one
  row of float32 logits;
- the warm start: ``min(sft.batch_size, demonstrations)`` rows of at least ``MIN_SFT_TOKENS``
  tokens, each token saving at least ``4 x hidden`` values per layer for the backward.

Lower bounds only: a setting that passes can still run out of memory (docs/performance.md,
"Memory", has the full accounting), but one refused here cannot run on this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from grpolab.errors import ConfigError

__all__ = ["ModelDims", "available_bytes", "check_memory"]

#: the fewest tokens (prompt + demonstration) a warm-start row holds
MIN_SFT_TOKENS = 8


@dataclass(frozen=True)
class ModelDims:
    """The sizes the memory of a batch depends on (from a Hugging Face config)."""

    hidden: int
    layers: int
    kv_width: int  # key/value heads x head size
    vocab: int
    element_bytes: int = 4

    @classmethod
    def from_config(cls, config: Any, element_bytes: int = 4) -> "ModelDims":
        get = (config.get if isinstance(config, Mapping) else lambda k, d=None: getattr(config, k, d))
        hidden = int(get("hidden_size", 0) or 0)
        heads = int(get("num_attention_heads", 1) or 1)
        kv_heads = int(get("num_key_value_heads", heads) or heads)
        head_dim = int(get("head_dim", 0) or 0) or hidden // max(heads, 1)
        return cls(hidden=hidden, layers=int(get("num_hidden_layers", 0) or 0), kv_width=kv_heads * head_dim,
                   vocab=int(get("vocab_size", 0) or 0), element_bytes=element_bytes)


def available_bytes(device: str = "cpu") -> int | None:
    """Memory available now: the GPU's free memory for a CUDA device, else ``MemAvailable`` (None: unknown)."""
    if str(device).startswith("cuda"):
        import torch

        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_memory(cfg, dims: ModelDims, *, n_demos: int, device: str = "cpu", available: int | None = None) -> None:
    """Refuse (:class:`ConfigError`) sampling or warm-start batches whose lower-bound memory exceeds
    ``available`` (default: :func:`available_bytes` of ``device``)."""
    free = available_bytes(device) if available is None else available
    if not free or dims.layers <= 0:
        return
    ro = cfg.rollout
    rows = ro.prompts_per_step * ro.group_size
    kv = rows * ro.max_new_tokens * 2 * dims.layers * dims.kv_width * dims.element_bytes + rows * dims.vocab * 4
    if kv > free:
        raise ConfigError(
            f"rollout.prompts_per_step x rollout.group_size = {ro.prompts_per_step} x {ro.group_size} = {rows:,} "
            f"samples of up to {ro.max_new_tokens} tokens hold at least {_gib(kv)} while sampling, more than the "
            f"{_gib(free)} available on {device}; lower rollout.group_size or rollout.prompts_per_step")
    warm = cfg.sft.enabled == "yes" or (cfg.sft.enabled == "auto" and not cfg.model.path)
    sft_rows = min(cfg.sft.batch_size, n_demos)
    acts = sft_rows * MIN_SFT_TOKENS * (dims.layers * 4 * dims.hidden * dims.element_bytes + 2 * dims.vocab * 4)
    if warm and acts > free:
        raise ConfigError(
            f"sft.batch_size={cfg.sft.batch_size} ({sft_rows:,} demonstrations a step) holds at least {_gib(acts)} "
            f"in the warm start's forward and backward, more than the {_gib(free)} available on {device}; lower "
            "sft.batch_size")
