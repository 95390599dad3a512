"""Grids of training runs: parse ``key=v1,v2`` factors and expand them (x seeds) into named runs.

Besides the Cartesian grid (:func:`expand_grid`), a sweep can run an explicit list of points, a
*design* (:func:`load_design`): e.g. a fractional factorial such as the L18 orthogonal array, which
covers one 2-level and up to seven 3-level factors in 18 runs with every pair of factors balanced,
so each factor's main effect is an average over the same mix of the others.
:func:`design_balance` checks that property.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["RunSpec", "design_balance", "design_factors", "expand_grid", "load_design", "parse_factor", "run_name"]


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


def _text(value: Any) -> str:
    """A design cell as the text an override would carry (``1e-4`` stays ``1e-4``; YAML floats as repr)."""
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        raise ValueError(f"design value {value!r} must be a number or a string")
    return str(value)


def load_design(path: str | Path, seeds: list[int] | None = None) -> list[RunSpec]:
    """Runs listed one per row in a YAML file: ``runs: [{optim.lr: 1e-4, trainer.seed: 0, ...}, ...]``.

    Every row must name the same keys. A row's ``trainer.seed`` is its seed; rows without one are
    repeated for each of ``seeds`` (default ``[0]``), and giving both is an error. Values are kept
    as written where the file quotes them (write ``"1e-4"`` to keep that spelling in run names).
    """
    from grpolab.config import parse_yaml_text, read_text_file

    path = Path(path)
    try:  # malformed YAML, a duplicated key or another encoding: one error naming the file
        doc = parse_yaml_text(read_text_file(path, f"design file {path}"), f"design file {path}")
    except OSError as e:
        raise ValueError(f"cannot read design file {path}: {e.strerror}") from None
    rows = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) and r for r in rows):
        raise ValueError(f"design file {path} needs a non-empty list 'runs:' of mappings "
                         "(one per run, e.g. - {optim.lr: '1e-4', trainer.seed: 0})")
    keys = list(rows[0])
    for i, r in enumerate(rows):
        if list(r) != keys:
            raise ValueError(f"design file {path}: run {i + 1} has keys {sorted(r)}, run 1 has {sorted(keys)}; "
                             "every run must set the same keys, in the same order")
    has_seed = "trainer.seed" in keys
    if has_seed and seeds is not None and list(seeds) != [0]:
        raise ValueError(f"design file {path} sets trainer.seed per run; drop --seeds (or the seed column)")
    fkeys = [k for k in keys if k != "trainer.seed"]
    specs, seen = [], set()
    for r in rows:
        fac = {k: _text(r[k]) for k in fkeys}
        for seed in ([int(r["trainer.seed"])] if has_seed else list(seeds or [0])):
            spec = RunSpec(name=run_name(fac, seed, fkeys), setting=run_name(fac, None, fkeys), factors=fac, seed=seed)
            if spec.name in seen:
                raise ValueError(f"design file {path} lists the run {spec.name} twice")
            seen.add(spec.name)
            specs.append(spec)
    return specs


def design_factors(specs: list[RunSpec]) -> list[tuple[str, list[str]]]:
    """The factors of a list of runs: each key with its values in order of first appearance."""
    keys = list(specs[0].factors) if specs else []
    return [(k, list(dict.fromkeys(s.factors[k] for s in specs))) for k in keys]


def design_balance(specs: list[RunSpec]) -> list[str]:
    """Pairs of factors (seed included) whose level combinations do not occur equally often.

    Empty for a full grid and for an orthogonal array; otherwise main effects are confounded with
    the unbalanced factor, and the summary says so.
    """
    cols = {k: [s.factors[k] for s in specs] for k, _ in design_factors(specs)}
    cols["seed"] = [str(s.seed) for s in specs]
    bad = []
    keys = list(cols)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            la, lb = set(cols[a]), set(cols[b])
            if len(la) < 2 or len(lb) < 2:
                continue
            counts = {(x, y): 0 for x in la for y in lb}
            for x, y in zip(cols[a], cols[b]):
                counts[(x, y)] += 1
            if len(set(counts.values())) > 1:
                bad.append(f"{a} x {b}")
    return bad
