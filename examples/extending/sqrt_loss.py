"""A new loss piece: an aggregation and an advantage estimator (docs/extending.md, "A loss").

Each axis of the objective is a registry of interchangeable functions with one signature
(:mod:`grpolab.objectives`); registering a function makes its name valid in the config
(``objective.aggregation``, ``objective.advantage``) and in ``policy_loss``. Two examples:

* aggregation ``sqrt``: each response's total weight is proportional to ``sqrt(|o_i|)``, between
  ``token`` (proportional to ``|o_i|``) and ``sequence`` (equal), spread evenly over its tokens::

      W[i, t] = mask[i, t] / (sqrt(|o_i|) * sum_j sqrt(|o_j|))

  An aggregation returns weights ``W[B,T]`` that depend on the mask (and optionally the
  advantages' signs, group ids, max_len), never on the model: the trainer computes them once per
  rollout batch and slices them per micro-batch, so gradient accumulation stays exact.
* advantage ``minmax``: ``A_i = (R_i - mean_g R) / (max_g R - min_g R)``, 0 for a group whose
  rewards are all equal. An advantage estimator maps ``(rewards[B], group_ids[B]) -> A[B]``.

Train with both (Python API: they are registered when this module is imported)::

    python examples/extending/sqrt_loss.py runs/sqrt trainer.steps=50
"""

from __future__ import annotations

import sys

import torch

from grpolab.objectives import ADVANTAGE_ESTIMATORS, AGGREGATIONS


@AGGREGATIONS.register("sqrt")
def sqrt_aggregation(mask_BT: torch.Tensor, **_: object) -> torch.Tensor:
    """``W[B,T]``: response ``i`` weighs ``sqrt(|o_i|) / sum_j sqrt(|o_j|)`` in total (empty rows: 0)."""
    root_B = mask_BT.sum(-1).sqrt()                      # [B]; 0 for an empty response
    total = root_B.sum().clamp_min(1e-12)
    per_token_B = torch.where(root_B > 0, 1.0 / (root_B.clamp_min(1e-12) * total), torch.zeros_like(root_B))
    return mask_BT * per_token_B.unsqueeze(-1)


@ADVANTAGE_ESTIMATORS.register("minmax")
def minmax_advantages(rewards_B: torch.Tensor, group_ids_B: torch.Tensor) -> torch.Tensor:
    """``A[B] = (R - mean_g R) / (max_g R - min_g R)``; 0 where a group's rewards are all equal."""
    _, idx_B = torch.unique(group_ids_B, return_inverse=True)
    k = int(idx_B.max()) + 1 if len(idx_B) else 0
    zeros_K = rewards_B.new_zeros(k)
    sum_K = zeros_K.index_add(0, idx_B, rewards_B)
    count_K = zeros_K.index_add(0, idx_B, torch.ones_like(rewards_B))
    max_K = zeros_K.scatter_reduce(0, idx_B, rewards_B, "amax", include_self=False)
    min_K = zeros_K.scatter_reduce(0, idx_B, rewards_B, "amin", include_self=False)
    spread_B = (max_K - min_K)[idx_B]
    centred_B = rewards_B - (sum_K / count_K)[idx_B]
    return torch.where(spread_B > 0, centred_B / spread_B.clamp_min(1e-12), torch.zeros_like(rewards_B))


def main(argv: list[str]) -> int:
    """``sqrt_loss.py RUN_DIR [section.key=value ...]``: the default run with both pieces."""
    from grpolab.config import load_config
    from grpolab.train import train

    run_dir, *overrides = argv or ["runs/sqrt"]
    cfg = load_config(overrides=["objective.aggregation=sqrt", "objective.advantage=minmax",
                                 f"trainer.run_dir={run_dir}", "trainer.steps=50", *overrides])
    result = train(cfg)
    print(f"sqrt + minmax: held-out accuracy {result.start_accuracy:.3f} -> {result.final_accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
