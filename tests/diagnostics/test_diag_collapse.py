"""Collapse detection on synthetic curves."""

import pytest

from grpolab.diagnostics import detect_collapse

STEPS = [0, 10, 20, 30, 40, 50, 60]


def test_stable_and_improving_runs_are_not_collapsed():
    assert not detect_collapse(STEPS, [0.35, 0.36, 0.40, 0.41, 0.43, 0.45, 0.47]).collapsed
    # a dip that recovers is not a collapse
    assert not detect_collapse(STEPS, [0.35, 0.30, 0.0, 0.0, 0.2, 0.3, 0.35]).collapsed
    # a single trailing zero is not "stays there" (min_points=2)
    assert not detect_collapse(STEPS, [0.35, 0.30, 0.3, 0.3, 0.3, 0.3, 0.0]).collapsed


def test_success_collapse_found_with_its_step():
    v = detect_collapse(STEPS, [0.35, 0.30, 0.10, 0.01, 0.0, 0.0, 0.0])
    assert v.collapsed and v.kinds == ["success"] and v.step == 30
    assert "0.350" in v.reason
    # a model that never solved anything cannot collapse
    assert not detect_collapse(STEPS, [0.0] * 7).collapsed


def test_entropy_collapse_and_explosion():
    steps = list(range(1, 41))
    flat = [0.35] * 7
    low = detect_collapse(STEPS, flat, steps, [1.0] * 20 + [0.05] * 20)
    assert low.kinds == ["entropy_collapse"] and low.step == 21
    high = detect_collapse(STEPS, flat, steps, [0.5] * 20 + [2.0] * 20)
    assert high.kinds == ["entropy_explosion"] and high.step == 21
    ok = detect_collapse(STEPS, flat, steps, [0.5] * 20 + [0.6] * 20)
    assert not ok.collapsed and ok.label == "-"
    both = detect_collapse(STEPS, [0.35, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0], steps, [1.0] * 20 + [0.01] * 20)
    assert both.label == "success+entropy_collapse" and both.step == 20
    with pytest.raises(ValueError):
        detect_collapse([0, 1], [0.1])


def test_near_zero_is_relative_to_the_start():
    # floor = max(0.02, 0.2 * 0.36) = 0.072: 0.36 -> ~0.05 and staying is a collapse ...
    v = detect_collapse([0, 10, 20, 30, 40], [0.36, 0.05, 0.05, 0.04, 0.05])
    assert v.kinds == ["success"] and v.step == 10
    # ... a fall to 0.09 (a quarter of the start) is a degradation, not a collapse
    assert not detect_collapse([0, 10, 20, 30, 40], [0.36, 0.12, 0.09, 0.10, 0.09]).collapsed


def test_no_eos_and_missing_values():
    steps = list(range(1, 41))
    trunc = [0.0] * 15 + [None] * 5 + [1.0] * 20  # None: metric missing at that step
    v = detect_collapse(STEPS, [0.35] * 7, steps, [None] * 40, steps, trunc)
    assert v.kinds == ["no_eos"] and v.step == 21
    assert not detect_collapse(STEPS, [0.35] * 7, steps, [None] * 40, steps, [0.0] * 40).collapsed


def test_sparse_evaluations_use_training_success_for_stays_there():
    # evaluations only before and after a 30-step run (docs/results/web_lr_grid.md): held-out success
    # 0.694 -> 0.000 cannot "stay" at one point; training success at 0 for the last 26 steps can
    steps = list(range(1, 31))
    dead = [0.31, 0.2, 0.05] + [0.0] * 27
    v = detect_collapse([0, 30], [0.694, 0.0], train_steps=steps, train_success=dead)
    assert v.kinds == ["success"] and v.step == 4 and "27 steps" in v.reason
    assert not detect_collapse([0, 30], [0.694, 0.0]).collapsed  # without it: undecided, as before
    # a held-out fall the training success does not share is not called a collapse ...
    alive = [0.3] * 25 + [0.0, 0.2, 0.0, 0.1, 0.0]
    assert not detect_collapse([0, 30], [0.694, 0.0], train_steps=steps, train_success=alive).collapsed
    # ... nor is dead training success while the last evaluation is still above the floor
    assert not detect_collapse([0, 30], [0.694, 0.3], train_steps=steps, train_success=dead).collapsed
    # missing values are skipped; a model that never succeeded in training cannot collapse
    assert detect_collapse([0, 30], [0.694, 0.0], train_steps=steps + [31],
                           train_success=dead + [None]).collapsed
    assert not detect_collapse([0, 30], [0.694, 0.0], train_steps=steps, train_success=[0.0] * 30).collapsed
    with pytest.raises(ValueError):
        detect_collapse([0, 30], [0.694, 0.0], train_steps=[1, 2], train_success=[0.1])
