"""Dtype names a config may use (``model.dtype``), shared by the HF and the GGUF loaders."""

from __future__ import annotations

import torch

__all__ = ["DTYPES", "resolve_dtype"]

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float64": torch.float64,
}


def resolve_dtype(dtype):
    """A ``torch.dtype`` for a dtype name, None for ``"auto"``/None (the checkpoint's own dtype)."""
    if dtype is None or dtype == "auto" or isinstance(dtype, torch.dtype):
        return None if dtype is None else dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(
        f"dtype must be None, 'auto', a torch.dtype or one of {sorted(DTYPES)}, got {dtype!r}"
    )
