"""KV-cache plumbing for :func:`grpolab.rollout.sample`.

Hugging Face's ``DynamicLayer`` grows its key/value tensors with ``torch.cat`` at every decoding
step, which copies the whole cache each step: O(T^2) memory traffic, and on CPU it dominated the
decode step (about two thirds of the time for a 2M-parameter Llama at batch 256). :class:`SlabLayer`
is a drop-in full-attention layer backed by a slab pre-allocated for the whole generation
(``[B, H, capacity, D]``); ``update`` writes the new keys/values in place and returns views of the
filled prefix, so attention still sees exactly ``past + new`` keys (no masked-out tail to read).

Only plain full-attention ``DynamicLayer`` layers are swapped; sliding-window, linear-attention
(SSM) and other layer kinds are kept as Hugging Face builds them and are re-indexed through their
own ``reorder_cache``. On transformers versions without the ``Cache.layers`` API we fall back to the
model's default cache.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

try:  # transformers >= 4.56 (layered cache API)
    from transformers.cache_utils import DynamicCache, DynamicLayer
except ImportError:  # pragma: no cover - old transformers
    from transformers.cache_utils import DynamicCache  # type: ignore

    DynamicLayer = None  # type: ignore[assignment]


class SlabLayer(DynamicLayer if DynamicLayer is not None else object):  # type: ignore[misc]
    """Full-attention cache layer over a pre-allocated slab ``[B, H, capacity, D]``.

    Created from the prefill keys/values ``[N, H, L, D]``, optionally repeating each row
    ``repeats`` times (rows ``n*repeats .. n*repeats+repeats-1`` copy prefill row ``n``), which is
    how one prefill per prompt serves a whole group of samples.
    """

    is_compileable = False
    is_sliding = False

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, capacity: int, repeats: int = 1):
        super().__init__()
        N, H, L, Dk = keys.shape
        Dv = values.shape[-1]
        capacity = max(capacity, L)
        self.device = keys.device
        self._k = keys.new_empty(N * repeats, H, capacity, Dk)
        self._v = values.new_empty(N * repeats, H, capacity, Dv)
        # broadcast copy instead of repeat_interleave: no temporary [N*repeats, H, L, D]
        self._k.view(N, repeats, H, capacity, Dk)[:, :, :, :L] = keys[:, None]
        self._v.view(N, repeats, H, capacity, Dv)[:, :, :, :L] = values[:, None]
        self._len = L
        self._refresh_views()
        self.is_initialized = True

    def _refresh_views(self) -> None:
        self.keys = self._k[:, :, : self._len]
        self.values = self._v[:, :, : self._len]

    def lazy_initialization(self, key_states, value_states) -> None:  # pragma: no cover - built initialised
        raise RuntimeError("SlabLayer is created from prefill states and never lazily initialised")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = key_states.shape[-2]
        end = self._len + n
        if end > self._k.shape[2]:  # out of room: grow geometrically (rare; capacity is sized up front)
            self._grow(max(end, 2 * self._k.shape[2]))
        self._k[:, :, self._len : end] = key_states
        self._v[:, :, self._len : end] = value_states
        self._len = end
        self._refresh_views()
        return self.keys, self.values

    def _grow(self, capacity: int) -> None:
        B, H, _, Dk = self._k.shape
        k = self._k.new_empty(B, H, capacity, Dk)
        v = self._v.new_empty(B, H, capacity, self._v.shape[-1])
        k[:, :, : self._len] = self._k[:, :, : self._len]
        v[:, :, : self._len] = self._v[:, :, : self._len]
        self._k, self._v = k, v

    def get_seq_length(self) -> int:
        return self._len

    def get_max_length(self) -> int:
        return -1

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k = self._k.index_select(0, indices)
        self._v = self._v.index_select(0, indices)
        self._refresh_views()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.batch_select_indices(beam_idx.to(self._k.device))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._k = self._k.repeat_interleave(repeats, dim=0)
        self._v = self._v.repeat_interleave(repeats, dim=0)
        self._refresh_views()

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of tokens to remove")
        self._len = max(0, self._len + tokens_to_remove)
        self._refresh_views()

    def reset(self) -> None:
        self._len = 0
        self._refresh_views()


@dataclass(frozen=True)
class ForwardSignature:
    """Which keyword names a causal LM's ``forward`` accepts (varies across transformers versions)."""

    cache_kw: str  # "cache" (transformers >= 5.x) or "past_key_values"
    logits_to_keep: bool

    @staticmethod
    def of(model: torch.nn.Module) -> "ForwardSignature":
        """Read ``model.forward``'s parameters; a wrapper that passes ``**kwargs`` through to the model
        it wraps (peft's ``PeftModel``: ``get_base_model()``) is read through to that model."""
        try:
            params = inspect.signature(model.forward).parameters
        except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
            params = {}
        passes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        base = getattr(model, "get_base_model", None)
        if passes_kwargs and callable(base) and "logits_to_keep" not in params:
            inner = base()
            if inner is not model and isinstance(inner, torch.nn.Module):
                return ForwardSignature.of(inner)
        cache_kw = "cache" if "cache" in params else "past_key_values"
        return ForwardSignature(cache_kw=cache_kw, logits_to_keep="logits_to_keep" in params)


def new_cache(model: torch.nn.Module):
    """An empty Hugging Face cache for ``model`` (``DynamicCache`` with per-layer types from config)."""
    try:
        return DynamicCache(config=model.config)
    except TypeError:  # pragma: no cover - old transformers
        return DynamicCache()


def supports_slabs(cache) -> bool:
    """True if ``cache`` exposes the layered API this module relies on."""
    return DynamicLayer is not None and isinstance(getattr(cache, "layers", None), list)


def expand_to_slabs(cache, capacity: int, repeats: int) -> None:
    """After prefill of ``N`` rows: swap full-attention layers for slabs of ``N*repeats`` rows.

    Other layer kinds are repeated in place through ``reorder_cache``.
    """
    index = None
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer and layer.is_initialized and layer.keys is not None and layer.keys.numel():
            cache.layers[i] = SlabLayer(layer.keys, layer.values, capacity, repeats)
        elif repeats > 1:
            if index is None:
                n = _batch_size(cache)
                index = torch.arange(n, device=_device(cache)).repeat_interleave(repeats)
            layer.reorder_cache(index)


def select_rows(cache, index: torch.Tensor) -> None:
    """Keep only batch rows ``index`` (``LongTensor [B']``) in every layer of ``cache``."""
    for layer in cache.layers:
        if isinstance(layer, SlabLayer):
            layer.batch_select_indices(index)
        else:
            layer.reorder_cache(index)


def _batch_size(cache) -> int:
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor) and keys.dim() == 4:
            return keys.shape[0]
    bs = cache.batch_size
    if bs < 0:  # pragma: no cover
        raise RuntimeError("cannot infer the cache batch size")
    return bs


def _device(cache) -> torch.device:
    for layer in cache.layers:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, torch.Tensor):
            return keys.device
    return torch.device("cpu")  # pragma: no cover
