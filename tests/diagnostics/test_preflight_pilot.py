"""The preflight's pilot: the paired change before/after a few GRPO steps decides GRPO's verdict."""

import dataclasses

import numpy as np
import pytest

from grpolab.diagnostics.preflight import (
    CANT_TELL,
    INDICATED,
    NOT_INDICATED,
    PILOT_MIN_GAIN,
    apply_pilot,
    items_to_decide,
    pilot_from_outcomes,
    pilot_verdict,
    preflight_from_outcomes,
    preflight_markdown,
)


def _res(solved, greedy, k=8, families=None):
    """A preflight whose item i has ``solved[i]`` of ``k`` samples right and greedy right when ``greedy[i]``."""
    S = [[1.0] * c + [0.0] * (k - c) for c in solved]
    return preflight_from_outcomes([float(g) for g in greedy], S, group_size=k, max_new_tokens=16, families=families)


def test_per_item_outcomes_are_kept_and_serialised():
    r = _res([0, 3, 8], [0, 1, 1])
    assert r.per_item == {"greedy_ok": [False, True, True], "solved": [0, 3, 8], "k": 8}
    assert r.to_dict()["per_item"]["solved"] == [0, 3, 8] and r.to_dict()["pilot"] is None


def test_paired_change_matches_a_hand_computation():
    rng = np.random.default_rng(0)
    b_solved = rng.integers(0, 9, 40).tolist()
    a_solved = [min(8, c + int(x)) for c, x in zip(b_solved, rng.integers(0, 3, 40))]
    b_greedy, a_greedy = rng.integers(0, 2, 40).tolist(), rng.integers(0, 2, 40).tolist()
    p = pilot_from_outcomes(_res(b_solved, b_greedy), _res(a_solved, a_greedy), steps=3)
    assert p.steps == 3 and p.n_items == 40 and p.k == 8
    assert p.sampled.before == pytest.approx(np.mean(b_solved) / 8)
    assert p.sampled.after == pytest.approx(np.mean(a_solved) / 8)
    diff = (np.asarray(a_solved) - np.asarray(b_solved)) / 8
    c = p.sampled.change
    assert c.value == pytest.approx(diff.mean()) and c.low <= c.value <= c.high
    assert p.greedy.change.value == pytest.approx(np.mean(a_greedy) - np.mean(b_greedy))
    # the interval is over items: pairing matters -- the same shift on every item has no spread at all
    q = pilot_from_outcomes(_res([2] * 20, [0] * 20), _res([4] * 20, [0] * 20), steps=1)
    assert q.sampled.change.low == pytest.approx(0.25) == q.sampled.change.high
    assert q.verdict == INDICATED


def test_verdicts_indicated_not_indicated_cant_tell():
    n = 64
    up = pilot_from_outcomes(_res([2] * n, [0] * n), _res([3] * n, [0] * n), steps=2)
    assert up.verdict == INDICATED
    flat = pilot_from_outcomes(_res([0] * n, [0] * n), _res([0] * n, [0] * n), steps=2)
    assert flat.sampled.change.high < PILOT_MIN_GAIN and flat.verdict == NOT_INDICATED
    down = pilot_from_outcomes(_res([4] * n, [1] * n), _res([3] * n, [1] * n), steps=2)
    assert down.verdict == NOT_INDICATED
    # half the items +8, half -8 of 8: mean 0 with a wide interval: can't tell, never a verdict
    mixed = pilot_from_outcomes(_res([0, 8] * (n // 2), [0] * n), _res([8, 0] * (n // 2), [0] * n), steps=2)
    assert mixed.sampled.change.low < 0 < mixed.sampled.change.high
    assert mixed.verdict == CANT_TELL
    # a start that was "not indicated" stays so whatever a pilot shows
    assert pilot_verdict(dataclasses.replace(up, start_verdict=NOT_INDICATED)) == NOT_INDICATED


def test_apply_pilot_rewrites_the_grpo_row_and_keeps_the_start():
    before = _res([1] * 32, [0] * 32)
    start = before.verdict()
    p = pilot_from_outcomes(before, _res([0] * 32, [0] * 32), steps=5, run_dir="runs/x/pilot")
    apply_pilot(before, p)
    g = before.methods[0]
    assert before.verdict() == NOT_INDICATED and g.rests_on.startswith("pilot of 5 steps")
    assert f"before the pilot: {start}" in g.note and "lower optim.lr" in g.note
    cal = before.calibration()
    assert cal["grpo"] == NOT_INDICATED and cal["grpo_start"] == start
    assert cal["pilot"]["sampled_change"]["value"] == pytest.approx(-1 / 8)
    md = preflight_markdown(before)
    assert "## Pilot (5 GRPO steps of this config, `runs/x/pilot`)" in md and "-12.5 points" in md


def test_pilot_refuses_mismatched_measurements():
    with pytest.raises(ValueError, match="k=4"):
        pilot_from_outcomes(_res([1] * 10, [0] * 10), _res([1] * 10, [0] * 10, k=4), steps=1)
    with pytest.raises(ValueError, match="at least"):
        pilot_from_outcomes(_res([1] * 3, [0] * 3), _res([1] * 3, [0] * 3), steps=1)


def test_per_family_pilot_verdicts():
    # task families: "up" gains 2 of 8 samples per item, "flat" stays, "none" has nothing within reach
    fam = ["up"] * 32 + ["flat"] * 32 + ["none"] * 96
    before = _res([1] * 64 + [0] * 96, [0] * 160, families=fam)
    after = _res([3] * 32 + [1] * 32 + [0] * 96, [0] * 160, families=fam)
    assert before.per_item["families"] == fam and before.families["none"].verdict == NOT_INDICATED
    p = pilot_from_outcomes(before, after, steps=4)
    f = p.families
    assert list(f) == ["up", "flat", "none"] and f["up"].n_items == 32 and f["none"].n_items == 96
    assert f["up"].sampled.change.value == pytest.approx(0.25) and f["up"].verdict == INDICATED
    assert f["flat"].verdict == NOT_INDICATED                     # learned nothing in the pilot
    assert f["none"].start_verdict == NOT_INDICATED == f["none"].verdict  # no reach before: stays
    assert p.verdict == INDICATED                                 # the whole: +0.25 on 32 of 160 items
    apply_pilot(before, p)
    assert before.calibration()["pilot"]["families"]["flat"]["verdict"] == NOT_INDICATED
    assert "| flat | 32 | indicated |" in preflight_markdown(before)


def test_the_rows_that_read_grpos_verdict_follow_the_pilot():
    # 16 of 64 items with 1 of 8 samples right, the rest none: 75% all-equal groups, dynamic sampling indicated
    before = _res([1] * 16 + [0] * 48, [0] * 64)
    ds = lambda r: next(m for m in r.methods if m.id == "dynamic_sampling")  # noqa: E731
    assert before.verdict() == INDICATED and ds(before).verdict == INDICATED
    apply_pilot(before, pilot_from_outcomes(before, _res([1] * 16 + [0] * 48, [0] * 64), steps=3))  # no move
    assert before.verdict() == NOT_INDICATED
    assert ds(before).verdict == NOT_INDICATED and ds(before).note == "GRPO is not indicated"
    assert [m.method for m in before.methods][:2] == ["GRPO", "dynamic sampling"]  # order kept


def test_items_to_decide_is_the_sample_size_at_which_the_same_changes_decide():
    # per 8 items: one gains 2 of 8 samples, one loses 1, six stay: mean +1/64, between 0 and +2 points
    pattern_after = [4, 2, 2, 2, 2, 2, 2, 1]

    def pilot(n):
        reps = n // 8
        return pilot_from_outcomes(_res([2] * 8 * reps, [0] * 8 * reps), _res(pattern_after * reps, [0] * 8 * reps),
                                   steps=2)

    p = pilot(64)
    assert p.verdict == CANT_TELL
    c = p.sampled.change
    n, verdict = items_to_decide(c.to_dict(), 64)
    # the farther threshold is 0 (the mean is +1.6 points, 0.4 from +2): the hand computation
    assert verdict == INDICATED and c.value == pytest.approx(1 / 64)
    assert n == int(np.ceil(64 * ((c.high - c.low) / 2 / c.value) ** 2))
    # the same changes on that many items (rounded up, with a margin for the bootstrap) decide; half do not
    assert pilot(int(1.3 * n) + 8).verdict == INDICATED
    assert pilot(max(64, n // 2)).verdict == CANT_TELL
    # a mean below +2 points with room below: the way to "not indicated" (distance 2 - mean), here nearer
    assert items_to_decide({"value": -0.01, "low": -0.05, "high": 0.03}, 100) == (
        int(np.ceil(100 * (0.04 / 0.03) ** 2)), NOT_INDICATED)
    assert items_to_decide({"value": 0.0, "low": 0.0, "high": 0.0}, 64) is None  # no spread: nothing to plan


@pytest.mark.parametrize("available", [None, 10_000, 64])
def test_a_cant_tell_pilot_says_how_many_items_would_decide(available):
    before = _res([2] * 64, [0] * 64)
    before.settings = {"seed": 0, "items_available": available}
    p = pilot_from_outcomes(before, _res([4, 2, 2, 2, 2, 2, 2, 1] * 8, [0] * 64), steps=2)
    apply_pilot(before, p)
    n, verdict = items_to_decide(p.sampled.change.to_dict(), 64)
    g = before.methods[0]
    assert before.verdict() == CANT_TELL and n > 64
    if available == 64:  # the task holds no more: no --n it cannot honour, a longer pilot instead
        assert f"about {n} items would decide (indicated), more than the 64 the task holds: a longer pilot " \
               f"(e.g. --pilot 4)" in g.note and "--n" not in g.note
    else:
        assert f"about {n} items (--n {n}) would decide (indicated), or a longer pilot (e.g. --pilot 4)" in g.note


def test_the_markdown_names_which_seed_is_which():
    """preflight.md's ``seed`` seeds the measurement's sampling; the pilot's training seed is named apart."""
    before = _res([2] * 64, [0] * 64)
    before.settings = {"seed": 0}
    p = pilot_from_outcomes(before, _res([4] * 64, [0] * 64), steps=2)
    md = preflight_markdown(apply_pilot(before, dataclasses.replace(p, trainer_seed=7)))
    assert "sampling seed: `0`" in md and "- seed:" not in md
    assert "## Pilot (2 GRPO steps of this config, trainer.seed 7," in md


def test_a_cant_tell_family_says_how_many_of_its_items_would_decide():
    fam = ["up"] * 32 + ["mixed"] * 64
    before = _res([1] * 32 + [2] * 64, [0] * 96, families=fam)
    after = _res([3] * 32 + [4, 2, 2, 2, 2, 2, 2, 1] * 8, [0] * 96, families=fam)
    p = pilot_from_outcomes(before, after, steps=2)
    assert p.families["mixed"].verdict == CANT_TELL and p.families["up"].verdict == INDICATED
    n, verdict = items_to_decide(p.families["mixed"].sampled.change.to_dict(), 64)
    md = preflight_markdown(apply_pilot(before, p))
    assert f"can't tell (about {n} items of this family would decide: {verdict}) |" in md
    assert "| up | 32 |" in md and "indicated (about" not in md  # decided rows carry no figure
