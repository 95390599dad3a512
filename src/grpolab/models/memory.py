"""Activation memory of a training forward: two exact ways to save fewer tensors for the backward.

On SmolLM2-135M-Instruct (a LoRA update, 12 rows x 196 tokens with shared prompts) autograd saved
2.2 GiB beyond the weights, 1.3 MB per computed token: the MLP's four 1,536-wide tensors per token
and layer (``gate``, ``up``, ``silu(gate)``, their product), the keys and values repeated from 3 to
9 heads for SDPA, and the 576-wide norm and attention tensors (docs/performance.md, "Memory").
Two of those are redundant:

* :func:`grouped_kv_attention`: Hugging Face's SDPA attention repeats each key/value head for the
  query heads that share it (``repeat_kv``) whenever an attention mask is passed, and SDPA saves
  the repeated copies. Inside this context it passes ``enable_gqa=True`` instead (PyTorch's CPU
  kernels handle grouped heads themselves), so the saved keys/values are the model's own
  ``num_key_value_heads``: a third on SmolLM2. CPU models only: on CUDA, SDPA with a mask and
  ``enable_gqa`` falls back to its math kernel.
* :func:`lean_swiglu`: ``down(silu(gate(x)) * up(x))`` saves ``gate`` for the SiLU's backward and
  ``silu(gate)`` and ``up`` for the product's; :class:`SiluMul` saves ``gate`` and ``up`` only and
  recomputes ``silu(gate)`` in the backward (one sigmoid per element), one MLP-wide tensor per token
  and layer fewer.

Both give the same values and gradients as the model's own forward up to float rounding
(``tests/models/test_memory.py``).
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager

import torch

#: the switch of transformers' SDPA attention (``transformers.integrations.sdpa_attention``)
FORCE_GQA_ENV = "TRANSFORMERS_SDPA_FORCE_GQA"


def _on_cpu(model: torch.nn.Module) -> bool:
    p = next(model.parameters(), None)
    return p is not None and p.device.type == "cpu"


@contextmanager
def grouped_kv_attention(model: torch.nn.Module):
    """Within the block, a CPU model's SDPA attention runs on its key/value heads (``enable_gqa``)
    instead of repeated copies of them; elsewhere (CUDA, eager attention, transformers versions
    without the switch) nothing changes. Not thread-safe: it sets an environment variable that
    transformers reads at each attention call."""
    if not _on_cpu(model) or os.environ.get(FORCE_GQA_ENV) is not None:  # the user's setting wins
        yield
        return
    os.environ[FORCE_GQA_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(FORCE_GQA_ENV, None)


class SiluMul(torch.autograd.Function):
    """``silu(gate) * up``, saving ``gate`` and ``up`` only (``silu(gate)`` is recomputed in the
    backward). ``gate, up: [..., I]`` of one shape and dtype -> ``[..., I]``."""

    @staticmethod
    def forward(ctx, gate, up):
        ctx.save_for_backward(gate, up)
        return torch.nn.functional.silu(gate) * up

    @staticmethod
    def backward(ctx, g):
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        silu = gate * sig
        g_up = g * silu if ctx.needs_input_grad[1] else None
        g_gate = None
        if ctx.needs_input_grad[0]:  # d silu / d gate = sig * (1 + gate * (1 - sig))
            g_gate = g * up * (sig * (1 + gate * (1 - sig)))
        return g_gate, g_up


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` through :class:`SiluMul` when a gradient is needed, else plainly."""
    if torch.is_grad_enabled() and (gate.requires_grad or up.requires_grad):
        return SiluMul.apply(gate, up)
    return torch.nn.functional.silu(gate) * up


def _lean_forward(self, x):
    return self.down_proj(silu_mul(self.gate_proj(x), self.up_proj(x)))


def _is_silu(act) -> bool:
    return isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"


def lean_swiglu(model: torch.nn.Module) -> int:
    """Route every SwiGLU MLP of ``model`` (a module with ``gate_proj``, ``up_proj``, ``down_proj``
    and a SiLU ``act_fn``: Llama, Qwen2, Mistral and their kin) through :func:`silu_mul`, in place.

    A module is changed only when its own forward computes ``down(silu(gate(x)) * up(x))``, checked
    on a random input (so an MLP with dropout, a different activation or another wiring keeps its
    forward). Returns the number of MLPs changed; calling it again changes nothing more.
    """
    changed = 0
    for module in model.modules():
        if getattr(module, "_grpolab_lean", False):
            continue
        if not all(hasattr(module, n) for n in ("gate_proj", "up_proj", "down_proj", "act_fn")):
            continue
        if not _is_silu(module.act_fn) or not all(
                isinstance(getattr(module, n), torch.nn.Module) for n in ("gate_proj", "up_proj", "down_proj")):
            continue
        w = getattr(module.gate_proj, "weight", None)
        if w is None or w.dim() != 2:
            continue
        with torch.no_grad():
            g = torch.Generator(device="cpu").manual_seed(0)
            x = torch.randn(1, 3, w.shape[1], generator=g).to(device=w.device, dtype=w.dtype)
            if not torch.allclose(module(x), _lean_forward(module, x), rtol=1e-4, atol=1e-5):
                continue
        module.forward = types.MethodType(_lean_forward, module)
        module._grpolab_lean = True
        changed += 1
    return changed
