"""A fused single-token decode step for Llama-architecture models (the tiny default model).

Why: at batch 64 the tiny default Llama spends most of each decode step outside its matmuls. A
Hugging Face forward for one new token runs ~300 small ATen ops per step (four ``nn.Linear`` per
attention block and three per MLP, RoPE through ``rotate_half`` twice per layer, a 4-D mask built
every step, and SDPA, whose CPU flash kernel costs ~0.9 ms per call at query length 1 although the
attention FLOPs are tiny) and each op costs 5-20 us of dispatch on a CPU. docs/performance.md has
the profile. This module computes the same function with fewer, larger ops:

* one ``[q; k; v]`` projection and one ``[gate; up]`` projection per layer (weights concatenated
  once per :func:`grpolab.rollout.sample` call, so they are the current weights);
* RoPE from a ``cos``/``sin`` table built once per call by the model's own rotary module (so the
  values are the ones HF uses), applied to queries and keys in one op;
* attention against the pre-allocated slabs of :class:`grpolab.rollout.cache.SlabLayer` as two
  batched matmuls (grouped-query heads share their key/value head without a ``repeat``) with an
  additive padding bias built once per call;
* RMSNorm weights folded into the projections after them, the attention scale into the query
  weights.

The math is the Llama forward's (Touvron et al. 2023); outputs equal HF's up to float rounding
(summation order in the fused matmuls), which the tests bound (logits within 1e-5, and the same
tokens as the no-cache reference). The prefill still goes through the model's own ``forward``.

Two modes. Up to ``MAX_FUSED_PARAMS`` (50 M) parameters the weights are concatenated and the norm
weights folded as above (a copy, made once per ``sample`` call). Larger models, and models with
LoRA adapters, are decoded **in place**: every projection reads the model's own weight tensors (no
copy: a 135 M-parameter model would otherwise hold 538 MB twice), the norm weights multiply the
normalised activations, and a peft LoRA projection adds ``(x A^T) B^T * scaling`` to the base
projection exactly as ``peft.tuners.lora.Linear.forward`` does (one active adapter, no DoRA or other
variant, not merged; dropout is off because the sampler runs the model in eval mode). What the
in-place mode still saves over the HF forward is the per-step work around the matmuls: the 4-D mask,
SDPA's query-length-1 overhead, ``rotate_half`` and the cache bookkeeping.

When it is used: :func:`fused_decoder` returns ``None`` -- and the sampler keeps calling the HF
forward -- for anything it does not reproduce exactly: non-Llama architectures, biases in the
projections, activations other than SiLU, sliding windows, RoPE types whose tables depend on the
sequence length, half-precision weights, wrapped or replaced sub-modules other than plain LoRA
adapters, and models with forward hooks registered (hooks would silently not run).
:func:`why_not_fused` says which.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["FusedLlamaDecoder", "fused_decoder", "why_not_fused"]

#: RoPE types whose cos/sin depend on the position only (a table built once is exact)
_STATIC_ROPE = ("default", "linear", "llama3")
#: larger models keep the HF forward: the fused weights are a copy (made once per ``sample`` call),
#: and at that size the per-op overhead the fusion removes is small next to the matmuls
MAX_FUSED_PARAMS = 50_000_000


def _rope_type(config) -> str:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return params.get("rope_type", params.get("type", "default")) if isinstance(params, dict) else "unknown"


def why_not_fused(model: torch.nn.Module) -> str | None:
    """``None`` if :class:`FusedLlamaDecoder` reproduces ``model``'s decode step, else the reason."""
    try:
        from transformers.models.llama.modeling_llama import LlamaForCausalLM, LlamaRMSNorm
    except ImportError:  # pragma: no cover - transformers without Llama
        return "transformers has no Llama implementation"
    if type(model) is not LlamaForCausalLM:
        return f"{type(model).__name__} is not LlamaForCausalLM"
    cfg = model.config
    if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False):
        return "projections have biases"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"activation {cfg.hidden_act!r} is not silu"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp != 1"
    if getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    if _rope_type(cfg) not in _STATIC_ROPE:
        return f"RoPE type {_rope_type(cfg)!r} depends on the sequence length"
    if getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return f"attention implementation {cfg._attn_implementation!r}"
    dtype = model.lm_head.weight.dtype
    if dtype not in (torch.float32, torch.float64):
        # HF's RMSNorm normalises in float32 and rounds back; folding the norm weight into a
        # half-precision projection would round differently
        return f"weights are {dtype}, not float32/float64"
    inner = model.model
    for i, layer in enumerate(inner.layers):
        at, mlp = layer.self_attn, layer.mlp
        for name, mod in (("q_proj", at.q_proj), ("k_proj", at.k_proj), ("v_proj", at.v_proj), ("o_proj", at.o_proj),
                          ("gate_proj", mlp.gate_proj), ("up_proj", mlp.up_proj), ("down_proj", mlp.down_proj)):
            why = _why_not_projection(mod)
            if why is not None:
                return f"layer {i} {name}: {why}"
        for name, mod in (("input_layernorm", layer.input_layernorm),
                          ("post_attention_layernorm", layer.post_attention_layernorm)):
            if type(mod) is not LlamaRMSNorm:
                return f"layer {i} {name} is a {type(mod).__name__}"
    if type(inner.norm) is not LlamaRMSNorm or type(model.lm_head) is not torch.nn.Linear or model.lm_head.bias is not None:
        return "final norm or LM head replaced"
    if type(inner.embed_tokens) is not torch.nn.Embedding:
        return "embedding replaced"
    for m in model.modules():
        if _user_hooks(m):
            return f"forward hooks registered on {type(m).__name__}"
    from torch.nn.modules import module as _module

    if _module._global_forward_hooks or _module._global_forward_pre_hooks:
        return "global forward hooks registered"
    return None


def _lora_linear_type():
    try:
        from peft.tuners.lora import Linear
    except ImportError:  # pragma: no cover - peft not installed
        return None
    return Linear


def _why_not_projection(mod) -> str | None:
    """``None`` if ``mod`` is a bias-free ``nn.Linear`` or a plain peft LoRA ``Linear`` over one."""
    if type(mod) is torch.nn.Linear:
        return None if mod.bias is None else "has a bias"
    lora = _lora_linear_type()
    if lora is None or type(mod) is not lora:
        return f"a {type(mod).__name__}, not a bias-free nn.Linear or a LoRA Linear"
    base = mod.base_layer
    if type(base) is not torch.nn.Linear or base.bias is not None:
        return "LoRA over something other than a bias-free nn.Linear"
    if mod.merged:
        return "LoRA adapter merged into the weights"
    if not mod.disable_adapters:
        active = [a for a in mod.active_adapters if a in mod.lora_A.keys()]
        if len(active) > 1:
            return "more than one active LoRA adapter"
        for a in active:
            if a in getattr(mod, "lora_variant", {}) or getattr(mod, "use_dora", {}).get(a, False):
                return "a LoRA variant (DoRA, ...)"
            if type(mod.lora_A[a]) is not torch.nn.Linear or type(mod.lora_B[a]) is not torch.nn.Linear:
                return "LoRA A/B are not plain linear layers"
            if mod.lora_A[a].bias is not None or mod.lora_B[a].bias is not None:
                return "LoRA B has a bias"
            if mod.lora_A[a].weight.dtype != base.weight.dtype:
                return "LoRA weights in another dtype than the base weight"
    if _user_hooks(mod):
        return "forward hooks registered"
    return None


def _user_hooks(m: torch.nn.Module) -> bool:
    """Whether ``m`` has forward hooks other than transformers' output-capturing ones (installed for
    good by the first ``output_hidden_states=True`` forward, e.g. the teacher's or the update's;
    they do nothing unless a forward asks for hidden states, which the decode step never does)."""
    hooks = list(m._forward_hooks.values()) + list(m._forward_pre_hooks.values())
    return any(getattr(h, "__module__", "") != "transformers.utils.output_capturing" for h in hooks)


def _projection(mod):
    """``(W, A, B, scaling)`` of a projection: ``y = x W^T + (x A^T) B^T * scaling`` (``A`` None: plain)."""
    if type(mod) is torch.nn.Linear:
        return (mod.weight, None, None, 1.0)
    if mod.disable_adapters:
        return (mod.base_layer.weight, None, None, 1.0)
    active = [a for a in mod.active_adapters if a in mod.lora_A.keys()]
    if not active:
        return (mod.base_layer.weight, None, None, 1.0)
    a = active[0]
    return (mod.base_layer.weight, mod.lora_A[a].weight, mod.lora_B[a].weight, mod.scaling[a])


def _lin(x: torch.Tensor, proj) -> torch.Tensor:
    w, a, b, scaling = proj
    y = F.linear(x, w)
    if a is not None:  # peft: result + lora_B(lora_A(dropout(x))) * scaling, dropout off in eval
        y = y + F.linear(F.linear(x, a), b) * scaling
    return y


def _has_lora(model) -> bool:
    lora = _lora_linear_type()
    return lora is not None and any(type(m) is lora for m in model.modules())


class FusedLlamaDecoder:
    """One-token decode step of a ``LlamaForCausalLM`` over a cache of :class:`SlabLayer` layers.

    Build it after the prefill (the slabs hold the prompt keys/values); call it once per step.

    Args:
        model: a model for which :func:`why_not_fused` is ``None`` (checked by :func:`fused_decoder`).
        cache: the HF cache whose ``layers`` are :class:`~grpolab.rollout.cache.SlabLayer`.
        attention_mask_BL: ``[B, L_max]`` long/bool, 1 for real tokens, for the whole generation
            (prompt mask then ones); sliced per step.
        max_position: largest position id that will be decoded (the RoPE table covers 0..it).
    """

    def __init__(self, model, cache, attention_mask_BL: torch.Tensor, max_position: int):
        cfg = model.config
        inner = model.model
        self.cache = cache
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads or cfg.num_attention_heads
        first = inner.layers[0].self_attn
        self.head_dim = first.head_dim
        self.scaling = first.scaling
        self.hidden = cfg.hidden_size
        n_params = sum(p.numel() for p in model.parameters())
        #: False: the model's own weights, read in place (large models, LoRA); True: fused copies
        self.copied = n_params <= MAX_FUSED_PARAMS and not _has_lora(model)
        # RMSNorm weights are folded into the projection that follows the norm (W @ (w * n) ==
        # (W * w) @ n), and the attention scale into the query rows: fewer elementwise ops per step
        self.layers = []
        for l in inner.layers if not self.copied else ():
            at, mlp = l.self_attn, l.mlp
            self.layers.append((
                l.input_layernorm.variance_epsilon, l.input_layernorm.weight,
                _projection(at.q_proj), _projection(at.k_proj), _projection(at.v_proj), _projection(at.o_proj),
                l.post_attention_layernorm.variance_epsilon, l.post_attention_layernorm.weight,
                _projection(mlp.gate_proj), _projection(mlp.up_proj), _projection(mlp.down_proj),
            ))
        for l in inner.layers if self.copied else ():
            at, mlp = l.self_attn, l.mlp
            w_qkv = torch.cat([at.q_proj.weight * self.scaling, at.k_proj.weight, at.v_proj.weight], 0)
            w_gu = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0)
            self.layers.append((
                l.input_layernorm.variance_epsilon,
                w_qkv * l.input_layernorm.weight,  # [(H+2Hkv)D, hidden]
                at.o_proj.weight,
                l.post_attention_layernorm.variance_epsilon,
                w_gu * l.post_attention_layernorm.weight,  # [2I, hidden]
                mlp.down_proj.weight,
            ))
        self.inter = inner.layers[0].mlp.intermediate_size
        self.embed = inner.embed_tokens.weight
        self.final_eps = inner.norm.variance_epsilon
        self.final_w = inner.norm.weight
        self.head_w = model.lm_head.weight * inner.norm.weight if self.copied else model.lm_head.weight
        dtype = self.embed.dtype
        # cos/sin [max_position+1, D] from the model's own rotary module; the sign of rotate_half is
        # folded into sin: rotate_half(x) * sin == swap_halves(x) * [-sin_1, sin_2]
        pos = torch.arange(max_position + 1, device=self.embed.device)[None]
        probe = torch.empty(0, device=self.embed.device, dtype=dtype)
        cos, sin = inner.rotary_emb(probe, pos)
        half = self.head_dim // 2
        self.cos = cos[0]
        self.sin = torch.cat([-sin[0, :, :half], sin[0, :, half:]], -1)
        # additive padding bias [B, 1, 1, L_max]: 0 where attended, -inf at left padding
        self.bias_B11L = torch.zeros(attention_mask_BL.shape, dtype=dtype, device=self.embed.device).masked_fill_(
            attention_mask_BL == 0, float("-inf"))[:, None, None, :]

    def select_rows(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (the cache's own rows are selected by the sampler)."""
        self.bias_B11L = self.bias_B11L[index]

    def __call__(self, tok_b: torch.Tensor, pos_b: torch.Tensor) -> torch.Tensor:
        """Logits ``[b, V]`` for the next token after ``tok_b`` ``[b]`` placed at positions ``pos_b`` ``[b]``.

        Appends the step's keys/values to the cache (in place).
        """
        b = tok_b.shape[0]
        H, Hk, D = self.n_heads, self.n_kv, self.head_dim
        rep = H // Hk
        x = F.embedding(tok_b, self.embed)  # [b, hidden]
        cos = self.cos[pos_b][:, None, :]  # [b, 1, D]
        sin = self.sin[pos_b][:, None, :]
        half = D // 2
        if not self.copied:
            return self._step_in_place(x, cos, sin, b)
        L = None
        for i, (eps_in, w_qkv, w_o, eps_post, w_gu, w_down) in enumerate(self.layers):
            qkv = F.linear(_rms(x, eps_in), w_qkv).view(b, H + 2 * Hk, D)
            qk = qkv[:, : H + Hk]  # [b, H+Hk, D]: RoPE on queries and keys at once
            qk = qk * cos + torch.cat([qk[..., half:], qk[..., :half]], -1) * sin
            q = qk[:, :H].reshape(b, Hk, rep, D)  # grouped-query: rep query heads per key/value head
            k = qk[:, H:].unsqueeze(2)  # [b, Hk, 1, D]
            v = qkv[:, H + Hk :].unsqueeze(2)
            keys, values = self.cache.layers[i].update(k, v)  # views [b, Hk, L, D]
            if L is None:
                L = keys.shape[2]
            scores = torch.matmul(q, keys.transpose(2, 3)).add_(self.bias_B11L[..., :L])  # [b, Hk, rep, L]
            attn = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), values)  # [b, Hk, rep, D]
            x = x + F.linear(attn.reshape(b, H * D), w_o)
            gu = F.linear(_rms(x, eps_post), w_gu)
            x = x + F.linear(F.silu(gu[:, : self.inter]) * gu[:, self.inter :], w_down)
        return F.linear(_rms(x, self.final_eps), self.head_w)

    def _step_in_place(self, x, cos, sin, b):
        """The decode step over the model's own weights (no fused copies; LoRA adapters applied)."""
        H, Hk, D = self.n_heads, self.n_kv, self.head_dim
        rep, half = H // Hk, D // 2
        L = None
        for i, (eps_in, w_in, q_p, k_p, v_p, o_p, eps_post, w_post, g_p, u_p, d_p) in enumerate(self.layers):
            h = _rms(x, eps_in) * w_in
            qk = torch.cat([_lin(h, q_p) * self.scaling, _lin(h, k_p)], -1).view(b, H + Hk, D)
            qk = qk * cos + torch.cat([qk[..., half:], qk[..., :half]], -1) * sin
            q = qk[:, :H].reshape(b, Hk, rep, D)
            k = qk[:, H:].unsqueeze(2)
            v = _lin(h, v_p).view(b, Hk, 1, D)
            keys, values = self.cache.layers[i].update(k, v)
            if L is None:
                L = keys.shape[2]
            scores = torch.matmul(q, keys.transpose(2, 3)).add_(self.bias_B11L[..., :L])
            attn = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), values)
            x = x + _lin(attn.reshape(b, H * D), o_p)
            h = _rms(x, eps_post) * w_post
            x = x + _lin(F.silu(_lin(h, g_p)) * _lin(h, u_p), d_p)
        return F.linear(_rms(x, self.final_eps) * self.final_w, self.head_w)


def _rms(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without its weight (folded into the next projection): ``x / sqrt(mean(x^2) + eps)``."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))


def fused_decoder(model, cache, attention_mask_BL: torch.Tensor, max_position: int) -> FusedLlamaDecoder | None:
    """A :class:`FusedLlamaDecoder` for ``model`` if it is supported and ``cache`` is all slabs, else ``None``."""
    from .cache import SlabLayer

    if why_not_fused(model) is not None:
        return None
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, list) or len(layers) != len(model.model.layers):
        return None
    if not all(isinstance(layer, SlabLayer) for layer in layers):
        return None
    return FusedLlamaDecoder(model, cache, attention_mask_BL, max_position)
