"""Within-group lengths of right vs wrong responses (``length/mixed_*``), the aggregation study's
mechanism metric (docs/results/aggregation_coupled.md)."""

import math

import torch

from grpolab.train.step_metrics import within_group_lengths


def test_hand_computed_groups():
    # group 0: right 10, 12 / wrong 30 -> 11 vs 30; group 1: all right (not mixed);
    # group 2: right 20 / wrong 20, 40 -> 20 vs 30; group 3: all wrong (not mixed)
    lengths = torch.tensor([10., 12., 30., 5., 6., 20., 20., 40., 44., 45.])
    solved = torch.tensor([1, 1, 0, 1, 1, 1, 0, 0, 0, 0], dtype=torch.bool)
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3])
    m = within_group_lengths(lengths, solved, group, 4)
    assert m["length/mixed_correct"] == (11 + 20) / 2
    assert m["length/mixed_incorrect"] == (30 + 30) / 2
    assert m["length/mixed_ratio"] == 30 / 15.5
    assert m["groups/mixed_frac"] == 0.5


def test_differs_from_pooled_lengths():
    # easy prompts have short responses, hard ones long ones and more failures: pooled, failures
    # look longer (wrong 9, 28, 30, 30 -> 24.25 vs right 10, 30 -> 20: 1.2125), but within each
    # mixed group they are *shorter* (9 vs 10, 28 vs 30: (18.5) / (20) = 0.925)
    lengths = torch.tensor([10., 9., 30., 28., 30., 30.])
    solved = torch.tensor([1, 0, 1, 0, 0, 0], dtype=torch.bool)
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    m = within_group_lengths(lengths, solved, group, 3)
    assert abs(m["length/mixed_ratio"] - 0.925) < 1e-6
    pooled = float(lengths[~solved].mean() / lengths[solved].mean())
    assert abs(pooled - 1.2125) < 1e-6


def test_no_mixed_group_is_nan():
    m = within_group_lengths(torch.tensor([3., 4.]), torch.tensor([True, False]), torch.tensor([0, 1]), 2)
    assert math.isnan(m["length/mixed_ratio"]) and math.isnan(m["length/mixed_correct"])
    assert m["groups/mixed_frac"] == 0.0


def test_per_token_advantages_equal_per_row_report_the_sequence_values():
    """step_metrics reports per-token advantages as each row's token mean; a row whose tokens all
    carry the same advantage (RLSD at lam = 0) must report exactly that value, as the sequence
    advantages do (a float32 mean of 37 copies of 0.7 is one ulp off)."""
    from grpolab.rollout.batch import Rollout
    from grpolab.rollout.experience import Experience
    from grpolab.train.step_metrics import step_metrics

    B, T = 4, 37
    mask = torch.ones(B, T)
    mask[1, 20:] = 0
    r = Rollout(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2, dtype=torch.long),
                response_ids=torch.ones(B, T, dtype=torch.long), response_mask=mask, sample_logp=torch.zeros(B, T),
                group_ids=torch.tensor([0, 0, 1, 1]), finished=torch.ones(B, dtype=torch.bool))
    seq = torch.tensor([0.7, -0.7, 1 / 3, -1 / 3])
    per_row = step_metrics(Experience.from_rollout(r, seq), {})
    per_token = step_metrics(Experience.from_rollout(r, seq[:, None] * mask), {})
    for k in ("advantages/mean", "advantages/max", "advantages/min"):
        assert per_token[k] == per_row[k], k
    assert float((seq[:, None].expand(B, T) * mask)[0].float().mean()) != float(seq[0])  # what a float32 mean gives
