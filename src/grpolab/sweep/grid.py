"""Grids of training runs: parse ``key=v1,v2`` factors and expand them (x seeds) into named runs."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

__all__ = ["RunSpec", "expand_grid", "parse_factor", "run_name"]


def parse_factor(text: str) -> tuple[str, list[str]]:
    """``"optim.lr=1e-4,3e-4"`` -> ``("optim.lr", ["1e-4", "3e-4"])`` (values kept as written)."""
    if "=" not in text:
        raise ValueError(f"grid factor {text!r} must look like section.key=v1,v2,... (e.g. optim.lr=1e-4,3e-4)")
    key, values = text.split("=", 1)
    key = key.strip()
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not key or not vals:
        raise ValueError(f"grid factor {text!r} needs a key and at least one value")
    if len(set(vals)) != len(vals):
        raise ValueError(f"grid factor {text!r} repeats a value")
    if key == "trainer.seed":
        raise ValueError("vary seeds with --seeds N, not with a grid factor on trainer.seed")
    return key, vals


def _short(key: str, keys: list[str]) -> str:
    last = key.split(".")[-1]
    clash = sum(k.split(".")[-1] == last for k in keys) > 1
    return key if clash else last


def _safe(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", value)


def run_name(factors: dict[str, str], seed: int | None, keys: list[str] | None = None) -> str:
    """A directory-safe name: ``lr=3e-4,kl_coef=0.01,seed=1`` (short keys unless they clash)."""
    keys = keys or list(factors)
    parts = [f"{_short(k, keys)}={_safe(v)}" for k, v in factors.items()]
    if seed is not None:
        parts.append(f"seed={seed}")
    return ",".join(parts) or "base"


@dataclass
class RunSpec:
    name: str  # directory name under the sweep's runs/
    setting: str  # the name without the seed (runs that differ only by seed share it)
    factors: dict[str, str] = field(default_factory=dict)  # key -> value as written
    seed: int = 0

    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.factors.items()] + [f"trainer.seed={self.seed}"]

    def factor_value(self, key: str) -> Any:
        """The factor's value parsed as YAML (numbers become numbers)."""
        return yaml.safe_load(self.factors[key])


def expand_grid(factors: list[tuple[str, list[str]]], seeds: list[int]) -> list[RunSpec]:
    """Cartesian product of the factors' values x seeds, in a stable order (seeds innermost)."""
    keys = [k for k, _ in factors]
    if len(set(keys)) != len(keys):
        raise ValueError(f"a grid key appears twice: {keys}")
    if not seeds:
        raise ValueError("need at least one seed")
    specs = []
    for combo in itertools.product(*[vals for _, vals in factors]):
        fac = dict(zip(keys, combo))
        for s in seeds:
            specs.append(RunSpec(name=run_name(fac, s, keys), setting=run_name(fac, None, keys),
                                 factors=fac, seed=s))
    return specs
