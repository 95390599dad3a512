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
