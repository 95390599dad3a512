"""Parameter-group drift and causal ablations (revert / transplant) between two checkpoints.

Groups are lists of parameter names, e.g. from :func:`grpolab.models.parameter_groups` ("embed",
"attention", "mlp", "norm", "head", "layer.3", "layer.3.mlp", ...).

* :func:`parameter_drift` -- per group: relative Frobenius change ``|W - W0|_F / |W0|_F`` (over
  the group's parameters taken together) and its share of the total squared movement
  ``sum |W - W0|^2`` over all parameters.
* :func:`swap_in` -- copy a group's weights from another state into a model, in place; "revert"
  is swapping base weights into the trained model, "transplant" is swapping trained weights into
  the base model. :func:`swapped` does it for a ``with`` block and restores the exact original
  tensors afterwards.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator, Mapping

import torch

__all__ = ["GroupDrift", "parameter_drift", "parameter_state", "swap_in", "swapped"]


def parameter_state(model) -> dict[str, torch.Tensor]:
    """Detached CPU copies of ``model.named_parameters()`` (tied tensors appear once)."""
    return {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}


@dataclass
class GroupDrift:
    group: str
    n_params: int  # number of scalar parameters
    base_norm: float  # |W0|_F over the group
    delta_norm: float  # |W - W0|_F over the group
    relative: float  # delta_norm / base_norm (inf if the base is all zeros and it moved)
    share: float  # delta_norm^2 / total squared movement of all parameters

    def to_dict(self) -> dict:
        return asdict(self)


def parameter_drift(base: Mapping[str, torch.Tensor], trained: Mapping[str, torch.Tensor],
                    groups: Mapping[str, Iterable[str]]) -> list[GroupDrift]:
    """Drift of each group from ``base`` to ``trained`` (both ``name -> tensor`` maps).

    The share's denominator is the squared movement of *every* parameter in ``trained`` (not just
    those in ``groups``), so shares of a partition sum to 1. Computed in float64.
    """
    missing = set(trained) ^ set(base)
    if missing:
        raise ValueError(f"base and trained states differ in parameter names, e.g. {sorted(missing)[:5]}")
    sq: dict[str, float] = {}
    base_sq: dict[str, float] = {}
    for name, w in trained.items():
        w0 = base[name]
        if w0.shape != w.shape:
            raise ValueError(f"parameter {name!r}: base shape {tuple(w0.shape)} != trained {tuple(w.shape)}")
        sq[name] = float((w.double() - w0.double()).pow(2).sum())
        base_sq[name] = float(w0.double().pow(2).sum())
    total = sum(sq.values())
    out = []
    for group, names in groups.items():
        names = list(names)
        unknown = [n for n in names if n not in trained]
        if unknown:
            raise ValueError(f"group {group!r} names unknown parameters, e.g. {unknown[:3]}")
        d2 = sum(sq[n] for n in names)
        b2 = sum(base_sq[n] for n in names)
        rel = (d2 ** 0.5) / (b2 ** 0.5) if b2 > 0 else (0.0 if d2 == 0 else float("inf"))
        out.append(GroupDrift(
            group=group, n_params=sum(trained[n].numel() for n in names), base_norm=b2 ** 0.5,
            delta_norm=d2 ** 0.5, relative=rel, share=d2 / total if total > 0 else 0.0,
        ))
    return out


@torch.no_grad()
def swap_in(model, source: Mapping[str, torch.Tensor], names: Iterable[str]) -> None:
    """Overwrite ``model``'s parameters ``names`` with ``source``'s values, in place (exact copy)."""
    params = dict(model.named_parameters())
    for n in names:
        if n not in params:
            raise KeyError(f"model has no parameter {n!r}")
        if n not in source:
            raise KeyError(f"source state has no parameter {n!r}")
        if params[n].shape != source[n].shape:
            raise ValueError(f"parameter {n!r}: shape {tuple(params[n].shape)} != source {tuple(source[n].shape)}")
        params[n].copy_(source[n].to(params[n].device, params[n].dtype))


@contextlib.contextmanager
def swapped(model, source: Mapping[str, torch.Tensor], names: Iterable[str]) -> Iterator[None]:
    """Within the block, ``model``'s parameters ``names`` hold ``source``'s values; restored after.

    The restore copies back the saved original tensors, so the model ends bit-identical to how it
    started (also when the block raises).
    """
    names = list(names)
    params = dict(model.named_parameters())
    saved = {n: params[n].detach().clone() for n in names if n in params}
    try:
        swap_in(model, source, names)
        yield
    finally:
        swap_in(model, saved, list(saved))
