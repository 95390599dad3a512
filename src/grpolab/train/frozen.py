"""Frozen copies of the policy: the KL reference, the behaviour model of a policy lag, the credit teacher."""

from __future__ import annotations

import copy

__all__ = ["frozen_copy", "reference_model"]


def frozen_copy(model):
    """A deep copy in eval mode with no gradients (reference, behaviour and teacher models)."""
    m = copy.deepcopy(model)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def reference_model(model):
    """The frozen KL reference: with LoRA the base model (the same module, adapters off: no copy of
    the weights), else :func:`frozen_copy`."""
    from grpolab.models.lora import AdaptersOff, has_lora

    return AdaptersOff(model) if has_lora(model) else frozen_copy(model)
