"""Every verdict line agrees with its numbers (issue 59 item 5), one test per contradiction found on
held-out settings, and the zero-success and degenerate-answer rules (item 6). Pure: hand-made outcomes."""

import math

import pytest

from grpolab.diagnostics.preflight import (
    CANT_TELL,
    CUT,
    INDICATED,
    NOT_INDICATED,
    VERDICTS,
    WRONG,
    ZERO_SUCCESS_ITEMS,
    PilotTraining,
    apply_pilot,
    degenerate_gain,
    modal_answer_share,
    pilot_from_outcomes,
    pilot_rule,
    pilot_training,
    preflight_from_outcomes,
    preflight_markdown,
    verdicts_from_counts,
)


def _res(solved, k=8, *, greedy=None, group_size=8, answers=None, **kw):
    """Items with ``solved[i]`` of k samples right and greedy right where ``greedy[i]``."""
    n = len(solved)
    greedy = greedy or [0] * n
    return preflight_from_outcomes([float(g) for g in greedy], [[1.0] * c + [0.0] * (k - c) for c in solved],
                                   group_size=group_size, max_new_tokens=12, greedy_answers=answers,
                                   sampled_reasons=[[None] * c + [WRONG] * (k - c) for c in solved],
                                   sampled_answer_seen=[[False] * k for _ in solved], **kw)


def _sentences(text):
    return [x for part in text.split(";") for x in part.split(". ")]


def test_no_headroom_is_there_when_nothing_was_within_reach():
    # 40 items, nothing solved or written: reachable 0 [0, 8.8]: undecided on the start; a pilot that
    # updated but changed nothing says "not indicated" -- and never that headroom was there
    before = _res([0] * 40)
    assert before.stats.reachable.value == 0 and before.verdict() == CANT_TELL
    p = pilot_from_outcomes(before, _res([0] * 40), steps=3, training=PilotTraining(3, 2, 5))
    apply_pilot(before, p)
    g = before.method("grpo")
    assert g.verdict == NOT_INDICATED
    assert "headroom is there" not in before.message and "within reach but" not in g.note
    assert "no item was within reach before the pilot either" in g.note


def test_items_within_reach_but_not_converted_say_so():
    before = _res([2] * 16 + [0] * 48)   # 16 of 64 items within reach
    p = pilot_from_outcomes(before, _res([2] * 16 + [0] * 48), steps=3, training=PilotTraining(3, 3, 12))
    apply_pilot(before, p)
    assert before.verdict() == NOT_INDICATED and "items were within reach but this recipe did not convert" in \
        before.method("grpo").note


@pytest.mark.parametrize("n", [40, ZERO_SUCCESS_ITEMS, 128])
def test_no_method_is_indicated_on_a_model_that_solves_nothing(n):
    # every precondition of the other methods holds: privileged text the teacher reads (AUC 0.95 over
    # 200 tokens), every response cut at the cap, off-policy with 200-token responses
    res = preflight_from_outcomes(
        [0.0] * n, [[0.0] * 8] * n, group_size=8, max_new_tokens=12, sampled_reasons=[[CUT] * 8] * n,
        sampled_answer_seen=[[False] * 8] * n, sampled_lengths=[[200.0] * 8] * n, has_privileged=True,
        readability={"teacher_auc": 0.95, "wrong_responses_localised": 200, "tokens_before": 2000}, off_policy=True)
    assert res.stats.solves_nothing
    assert [m.id for m in res.methods if m.verdict == INDICATED] == []
    assert all(not m.set_lines for m in res.methods)
    assert res.method("credit").verdict != INDICATED and res.method("ratio").verdict != INDICATED


def test_not_indicated_never_shares_a_sentence_with_cant_tell():
    # the start is undecided: 2 of 40 items within reach, 5.0% [1.4, 16.5] spans the 5% threshold
    before = _res([1] * 2 + [0] * 38)
    assert before.verdict() == CANT_TELL
    p = pilot_from_outcomes(before, _res([0] * 40), steps=3, training=PilotTraining(3, 1, 1))
    apply_pilot(before, p)
    assert before.verdict() == NOT_INDICATED
    for m in before.methods:
        if m.verdict != CANT_TELL:
            assert not any("can't tell" in x for x in _sentences(m.note)), (m.id, m.note)
    assert "can't tell" not in before.message
    assert "before the pilot: undecided" in before.method("grpo").note


def test_dynamic_sampling_is_not_ruled_out_in_the_sparse_signal_case():
    # 400 items, 12 with 1 of 8 samples right: mixed items 3% [1.7, 5.2], 97% all-equal groups
    res = _res([1] * 12 + [0] * 388)
    assert res.stats.mixed_items.value < 0.05 <= res.stats.mixed_items.high
    assert res.verdict("dynamic_sampling") != NOT_INDICATED
    # the SmolLM2 sums shape: the answer written in cut responses makes GRPO indicated; few mixed groups
    n = 200
    sums = preflight_from_outcomes(
        [0.0] * n, [[1.0] + [0.0] * 7] * 4 + [[0.0] * 8] * (n - 4), group_size=8, max_new_tokens=12,
        sampled_reasons=[[None] + [CUT] * 7] * 4 + [[CUT] * 8] * (n - 4),
        sampled_answer_seen=[[False] + [True] * 7] * 4 + [[True] * 8] * (n - 4))
    assert sums.verdict() == INDICATED and sums.stats.mixed_items.value < 0.05
    ds = sums.method("dynamic_sampling")
    assert ds.verdict == INDICATED and "sparse signal" in ds.note
    # GRPO has no signal at this group size (2 of 400 items mixed: at most 1.8%): dynamic sampling is
    # what could fill its batches, so it is "can't tell" with the lines to try, not "not indicated"
    none = preflight_from_outcomes(
        [0.0] * 400, [[1.0] + [0.0] * 7] * 2 + [[0.0] * 8] * 398, group_size=8, max_new_tokens=12,
        sampled_reasons=[[None] + [CUT] * 7] * 2 + [[CUT] * 8] * 398,
        sampled_answer_seen=[[False] + [True] * 7] * 2 + [[True] * 8] * 398)
    assert none.method("grpo").cause == "no_signal"
    ds = none.method("dynamic_sampling")
    assert ds.verdict == CANT_TELL and "rollout.dynamic_sampling=true" in ds.note


def test_a_pilot_that_never_updated_decides_nothing():
    before = _res([1] * 12 + [0] * 388)    # the sparse case: the pilot's steps may all draw all-equal groups
    start = before.verdict()
    training = pilot_training([{"step": s, "groups/with_signal": 0} for s in (1, 2, 3)])
    assert training == PilotTraining(steps=3, updates=0, groups_with_signal=0)
    p = pilot_from_outcomes(before, _res([1] * 12 + [0] * 388), steps=3, training=training)
    assert p.sampled.change.value == 0 and p.verdict == CANT_TELL  # 0 by construction: no evidence
    apply_pilot(before, p)
    g = before.method("grpo")
    assert g.verdict == CANT_TELL and g.cause == "pilot_no_update"
    assert "can't tell: the pilot never updated" in g.note
    for fix in ("rollout.prompts_per_step", "rollout.dynamic_sampling=true", "rollout.max_new_tokens=24"):
        assert fix in g.note
    assert "optim.lr" not in g.note and "learning rate" not in g.note  # no update: not the lr
    assert "(0 of 3 steps updated, 0 groups with signal)" in g.rests_on
    assert before.verdict("dynamic_sampling") != NOT_INDICATED
    assert "Its training: 0 of 3 steps updated, 0 groups with signal in all." in preflight_markdown(before)
    assert before.calibration()["pilot"]["training"] == {"steps": 3, "updates": 0, "groups_with_signal": 0}
    assert start != NOT_INDICATED


def test_pilot_training_counts_steps_with_signal():
    rows = [{"step": 1, "groups/with_signal": 0}, {"step": 2, "groups/with_signal": 3},
            {"step": 3, "groups/with_signal": 1}, {"eval/accuracy": 0.5}]
    assert pilot_training(rows) == PilotTraining(steps=3, updates=2, groups_with_signal=4)


def test_pilot_rule_reads_any_paired_change():
    before = [0.0] * 10 + [0.5] * 10
    assert pilot_rule(before, [0.5] * 20) == INDICATED               # +0.25 on half the items: interval above 0
    assert pilot_rule(before, before) == NOT_INDICATED               # no change: below +2 points
    assert pilot_rule(before, [0.5] * 20, updates=0) == CANT_TELL     # no update: decides nothing
    assert pilot_rule(before[:4], [0.5] * 4) == CANT_TELL             # too few items
    with pytest.raises(ValueError, match="same items"):
        pilot_rule(before, before[:5])


def test_zero_successes_on_enough_items_decide_without_a_pilot():
    # the exact one-sided bound 1 - 0.05^(1/n) falls below 5% from n = 59 (4.95%; at 58: 5.03%)
    assert ZERO_SUCCESS_ITEMS == 59
    assert 1 - 0.05 ** (1 / 59) < 0.05 < 1 - 0.05 ** (1 / 58)
    assert _res([0] * 58).verdict() == CANT_TELL
    res = _res([0] * 59)
    g = res.method("grpo")
    assert g.verdict == NOT_INDICATED and g.cause == "zero_reach" and "no pilot needed" in g.note
    assert "4.95% < 5%" in g.note
    # the held-out case of issue 59: 0 of 64 was "can't tell" (Wilson's 5.7% > 5%); now decided
    v = verdicts_from_counts(64, 0, 0, k=8)
    assert v["grpo"] == NOT_INDICATED and v["reachable_ci"][1] == pytest.approx(0.0566, abs=1e-3)
    # a greedy success that no sample adds to is not within reach either: same rule
    assert _res([8] * 2 + [0] * 62, greedy=[1] * 2 + [0] * 62).verdict() == NOT_INDICATED
    # one item within reach keeps the interval rule: 1 of 64 -> [0.3, 8.3]: undecided
    assert _res([1] + [0] * 63).verdict() == CANT_TELL


def test_every_rule_is_registered_by_id():
    assert list(VERDICTS) == ["grpo", "dynamic_sampling", "overlong", "credit", "balanced", "ratio"]
    res = _res([1] * 20 + [0] * 20)
    assert [m.id for m in res.methods] == list(VERDICTS)
    assert res.method("grpo").method == "GRPO"
    with pytest.raises(KeyError, match="ids: grpo"):
        res.method("GRPO")   # display names are not keys


def test_modal_answer_share():
    share, top = modal_answer_share(["7", "7", "3", None, " 7 ", ""])
    assert top == "7" and share.value == pytest.approx(3 / 6) and share.n == 6
    assert modal_answer_share([None, ""]) is None


def test_a_gain_from_a_constant_answer_is_flagged():
    # 40 items; before: varied answers, 4 solved; after: 20 items answer "0", which is right on 10 of them
    ref = ["0"] * 10 + [str(i) for i in range(1, 31)]
    before_ans = [str(i + 100) for i in range(36)] + ref[36:]
    after_ans = ["0"] * 20 + [str(i + 100) for i in range(16)] + ref[36:]
    gb = [a == r for a, r in zip(before_ans, ref)]
    ga = [a == r for a, r in zip(after_ans, ref)]
    d = degenerate_gain(gb, ga, before_ans, after_ans)
    assert (d.answer_after, d.share_after, d.newly_solved, d.newly_solved_with_it) == ("0", 0.5, 10, 10)
    assert d.share_before == pytest.approx(1 / 40) and d.flag
    # a real gain: the newly solved items each get their own answer
    real = [r if 10 <= i < 30 else a for i, (r, a) in enumerate(zip(ref, before_ans))]
    assert not degenerate_gain(gb, [a == r for a, r in zip(real, ref)], before_ans, real).flag
    # through the pilot: the note and the report say so
    before = _res([1] * 4 + [0] * 36, greedy=[int(x) for x in gb], answers=before_ans)
    after = _res([1] * 4 + [4] * 10 + [0] * 26, greedy=[int(x) for x in ga], answers=after_ans)
    assert after.stats.modal_answer.value == pytest.approx(0.5) and after.stats.modal_answer_text == "0"
    p = pilot_from_outcomes(before, after, steps=3, training=PilotTraining(3, 3, 9))
    assert p.answers.flag
    apply_pilot(before, p)
    assert "degenerate: 10 of the 10 newly solved items are answered '0'" in before.method("grpo").note
    assert "flagged: the gain comes from a constant answer" in preflight_markdown(before)
    assert before.calibration()["pilot"]["degenerate"] is True


def test_headroom_is_one_section_with_one_paired_interval():
    # 4 items, k = 4: greedy solves item 0; samples solve 0/4, 4/4, 2/4, 0/4 -> per item sampled - greedy:
    # -1, +1, +0.5, 0: mean +0.125, t interval with 3 df: sd = sqrt(((-1.125)^2 + 0.875^2 + 0.375^2 + 0.125^2)/3)
    res = preflight_from_outcomes([1.0, 0, 0, 0], [[0.0] * 4, [1.0] * 4, [1.0] * 2 + [0.0] * 2, [0.0] * 4],
                                  group_size=4, max_new_tokens=8)
    d = res.stats.sampled_minus_greedy
    sd = math.sqrt((1.125 ** 2 + 0.875 ** 2 + 0.375 ** 2 + 0.125 ** 2) / 3)
    assert d.value == pytest.approx(0.125)
    assert d.high - d.value == pytest.approx(3.182446 * sd / 2, rel=1e-4)   # t(0.975, 3) = 3.1824
    md = preflight_markdown(res)
    assert md.count("## Headroom") == 1 and "| mean sample - greedy (paired per item) | +12.5 points" in md
