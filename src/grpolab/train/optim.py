"""AdamW with linear warm-up and a constant, linear or cosine schedule."""

from __future__ import annotations

import math

import torch


def build_optimizer(model: torch.nn.Module, *, lr: float, weight_decay: float, betas: tuple[float, float]):
    """AdamW; no weight decay on biases, norms and embeddings-like 1-D parameters."""
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


def build_scheduler(optimizer, *, warmup_steps: int, total_steps: int, schedule: str):
    """LambdaLR: linear warm-up over ``warmup_steps`` then ``schedule`` decay to 0 at ``total_steps``."""

    def factor(step: int) -> float:
        if warmup_steps > 0 and step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
