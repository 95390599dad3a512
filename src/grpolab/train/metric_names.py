"""verl-style names for grpolab's step metrics, and rows that always carry the same keys.

grpolab's own names (``update/clip_frac``, ``reward/mean``, ...) stay; with ``log.metric_names=both``
(default) each step row also carries the verl names of the common metrics, so a dashboard built
for verl (or a comparison script) reads a grpolab run unchanged. The table is in
docs/real-models.md. Where grpolab's quantity is not exactly verl's, the alias still carries
grpolab's value and the table says how they differ (``actor/ppo_kl`` is grpolab's k3 estimate of
KL(old || new), verl logs the k1 mean of ``old - new``).

:func:`fill_row` gives every row the same keys: any key of the run's schema that a step did not
compute (a step where every row was skipped has no clip fraction; a batch with no correct answer
has no ``length/correct``) is written as NaN instead of being left out.
"""

from __future__ import annotations

import math
from typing import Iterable

__all__ = ["VERL_NAMES", "fill_row", "with_verl_names"]

#: grpolab key -> verl key. Sums of grpolab keys are in :data:`VERL_SUMS`.
VERL_NAMES: dict[str, str] = {
    "update/pg_loss": "actor/pg_loss",
    "update/clip_frac_dual": "actor/pg_clipfrac_lower",
    "update/approx_kl": "actor/ppo_kl",
    "update/entropy": "actor/entropy",
    "update/grad_norm": "actor/grad_norm",
    "update/kl": "actor/kl_loss",
    "lr": "actor/lr",
    "reward/mean": "critic/score/mean",
    "reward/max": "critic/score/max",
    "reward/min": "critic/score/min",
    "advantages/mean": "critic/advantages/mean",
    "advantages/max": "critic/advantages/max",
    "advantages/min": "critic/advantages/min",
    "length/mean": "response_length/mean",
    "length/max": "response_length/max",
    "length/min": "response_length/min",
    "length/truncated_frac": "response_length/clip_ratio",
    "prompt_length/mean": "prompt_length/mean",
    "time/rollout": "timing_s/gen",
    "time/reward": "timing_s/reward",
    "time/update": "timing_s/update_actor",
    "time/teacher": "timing_s/teacher",
    "time/step": "timing_s/step",
    "tokens_per_s": "perf/throughput",
}
#: verl key -> the grpolab keys whose sum it is (verl's pg_clipfrac counts both clip sides).
VERL_SUMS: dict[str, tuple[str, ...]] = {
    "actor/pg_clipfrac": ("update/clip_frac_low", "update/clip_frac_high"),
}


def with_verl_names(row: dict[str, float]) -> dict[str, float]:
    """``row`` plus the verl alias of every mapped key it holds (NaN propagates through sums)."""
    out = dict(row)
    for ours, theirs in VERL_NAMES.items():
        if ours in row:
            out[theirs] = row[ours]
    for theirs, parts in VERL_SUMS.items():
        if any(p in row for p in parts):
            out[theirs] = sum(float(row.get(p, math.nan)) for p in parts)
    return out


def fill_row(row: dict[str, float], schema: Iterable[str]) -> dict[str, float]:
    """``row`` with NaN for every key of ``schema`` it lacks (keys of ``row`` outside it stay)."""
    out = {k: math.nan for k in schema}
    out.update(row)
    return out
