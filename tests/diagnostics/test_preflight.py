"""The preflight's statistics and verdicts (grpolab.diagnostics.preflight): pure, no model."""

import itertools
import math

import pytest
import torch

from grpolab.diagnostics.preflight import (
    CANT_TELL,
    CUT,
    ERROR,
    INDICATED,
    MIN_ITEMS,
    NOT_INDICATED,
    UNPARSED,
    WRONG,
    all_equal_share,
    answer_in_text,
    auc_interval,
    failure_reason,
    length_coupling,
    preflight_from_outcomes,
    preflight_markdown,
    verdicts_from_counts,
    wilson,
)
from grpolab.rewards.final_line import final_line_reward


def test_wilson_matches_published_values():
    # Wilson 1927 / Newcombe 1998 table: 0/10 -> [0, 0.2775]; 5/10 -> [0.2366, 0.7634]; 81/263 -> [0.2553, 0.3662]
    assert wilson(0, 10).high == pytest.approx(0.2775, abs=1e-4) and wilson(0, 10).low == 0
    lo, hi = wilson(5, 10).low, wilson(5, 10).high
    assert (lo, hi) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))
    w = wilson(81, 263)
    assert w.low == pytest.approx(0.2553, abs=1e-3) and w.high == pytest.approx(0.3662, abs=1e-3)


def test_auc_interval_is_hanley_mcneil():
    ci = auc_interval(0.8, 50, 50)
    q1, q2 = 0.8 / 1.2, 2 * 0.64 / 1.8
    se = math.sqrt((0.16 + 49 * (q1 - 0.64) + 49 * (q2 - 0.64)) / 2500)
    assert ci.high - ci.value == pytest.approx(1.96 * se) and ci.value - ci.low == pytest.approx(1.96 * se)
    assert auc_interval(None, 5, 5) is None and auc_interval(0.7, 0, 5) is None


def test_failure_reasons_from_the_final_line_verifiers_info():
    exp = "3 + 15"
    cases = {
        "3 + 15 = 18": None,  # solved
        "3 + 15 = 17": WRONG,  # an answer in the right form, wrong
        "The answer is 18, not 17": UNPARSED,  # form "other": no answer where the verifier reads
        "": UNPARSED,
    }
    for text, want in cases.items():
        r = final_line_reward(text, "18", expression=exp)
        assert failure_reason(r.score, r.info, finished=True) == want, text
    r = final_line_reward("3 + 15 = 18\n\nIn mathematics", "18", expression=exp)
    assert failure_reason(r.score, r.info, finished=False) == CUT  # ran past the cap after the answer
    assert failure_reason(0.0, {"error": "TimeoutError"}, finished=False) == ERROR  # an error wins
    assert failure_reason(0.0, {"extracted": None, "method": None}, True) == UNPARSED  # the math verifier's info
    assert failure_reason(0.0, {"extracted": "17", "method": "boxed", "match": None}, True) == WRONG


def test_answer_in_text_matches_whole_tokens_only():
    assert answer_in_text("3 + 15 = 18\n\nIn mathematics", "18")
    assert answer_in_text("so it is 18.", "18")
    assert not answer_in_text("118", "18") and not answer_in_text("18.5", "18") and not answer_in_text("x18", "18")
    assert not answer_in_text("anything", None) and not answer_in_text("anything", "")
    assert not answer_in_text("a", "a" * 65)


def test_all_equal_share_is_exact_over_subsets():
    rewards = [1, 0, 1, 1, 0, 0, 0, 1, 1, 1]  # k = 10, c = 6
    for G in (2, 4, 8):
        subsets = list(itertools.combinations(rewards, G))
        brute = sum(len(set(s)) == 1 for s in subsets) / len(subsets)
        assert all_equal_share([rewards], G)[0] == pytest.approx(brute)
    assert all_equal_share([[1, 1, 1, 1]], 4)[0] == 1 and all_equal_share([[1, 0, 0, 0]], 4)[0] == 0
    assert all_equal_share([[0.5, 0.5, 0.2]], 3)[0] == 0  # graded rewards: equal or not
    assert all_equal_share([[1, 0]], 4)[0] == pytest.approx(2 * 0.5**4)  # fewer samples than G: plug-in


def test_length_coupling_matches_the_training_metric():
    from grpolab.train.step_metrics import within_group_lengths

    lengths = [[10, 20, 30, 40], [5, 5, 9, 9], [7, 7, 7, 7], [12, 30, 12, 3]]
    solved = [[1, 0, 0, 1], [1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]]
    lc = length_coupling(lengths, [[bool(x) for x in r] for r in solved])
    ref = within_group_lengths(torch.tensor(sum(lengths, []), dtype=torch.float64),
                               torch.tensor(sum(solved, []), dtype=torch.bool), torch.arange(16) // 4, 4)
    assert lc.fail_success_length_ratio == pytest.approx(ref["length/mixed_ratio"])
    assert lc.mixed_groups == 3 and lc.responses == 16
    lo, hi = lc.ratio_ci
    assert lo <= lc.fail_success_length_ratio <= hi


def _sums_like(n=64, k=8, seed=0):
    """Outcomes shaped like SmolLM2 on sums 0..20 (docs/results/real_model.md): greedy solves 18%, a
    sample solves 7% more, 74% of responses run past the 12-token cap with the sum already written."""
    import random

    rng = random.Random(seed)
    g, S, gr, sr, gs, ss, L = [], [], [], [], [], [], []
    for i in range(n):
        greedy_ok = i < int(0.18 * n)
        some = greedy_ok or i < int(0.25 * n)
        g.append(1.0 if greedy_ok else 0.0)
        gr.append(None if greedy_ok else CUT)
        gs.append(not greedy_ok)  # the right sum is written before the cap
        row, rr, rs, rl = [], [], [], []
        for j in range(k):
            ok = some and j < 2
            cut = not ok and rng.random() < 0.8
            row.append(1.0 if ok else 0.0)
            rr.append(None if ok else (CUT if cut else WRONG))
            rs.append(not ok and cut and rng.random() < 0.5)
            rl.append(12 if cut else 6)
        S.append(row); sr.append(rr); ss.append(rs); L.append(rl)
    return dict(greedy_rewards=g, sampled_rewards=S, greedy_reasons=gr, sampled_reasons=sr, greedy_answer_seen=gs,
                sampled_answer_seen=ss, sampled_lengths=L)


def test_the_sums_case_is_indicated_not_no_headroom():
    res = preflight_from_outcomes(**_sums_like(), group_size=8, max_new_tokens=12)
    s = res.stats
    assert s.pass_at_k.value - s.greedy.value < 0.10  # pass@k alone sees a few points
    assert s.answer_in_failure.value > 0.5  # the answers already written before the cap
    assert res.verdict() == INDICATED
    grpo = res.methods[0]
    assert "pass@k underestimates" in grpo.note and "n=64" in grpo.rests_on
    over = next(m for m in res.methods if m.id == "overlong")
    assert over.verdict == INDICATED and "objective.overlong_buffer=3" in over.set_lines
    assert not any("mask_truncated" in x for x in over.set_lines) and "not truncation masking" in over.note
    assert res.stats.gain_ceiling == s.reachable.high
    md = preflight_markdown(res)
    assert "| GRPO | **indicated**" in md and "docs/results/headroom.md" in md and CUT in md


def test_a_handful_of_items_never_says_not_indicated():
    # 8 items, nothing solved, nothing reachable: the interval cannot exclude 5% -> can't tell
    res = preflight_from_outcomes([0.0] * 8, [[0.0] * 8] * 8, group_size=8, max_new_tokens=12)
    assert res.verdict() == CANT_TELL and "undecided on 8 items" in res.methods[0].note
    # the same with 128 items: no headroom is now a finding
    res = preflight_from_outcomes([0.0] * 128, [[0.0] * 8] * 128, group_size=8, max_new_tokens=12,
                                  sampled_reasons=[[WRONG] * 8] * 128, sampled_answer_seen=[[False] * 8] * 128)
    assert res.verdict() == NOT_INDICATED and "no headroom on 128 items" in res.methods[0].note
    assert next(m for m in res.methods if m.id == "dynamic_sampling").verdict == NOT_INDICATED


def test_fewer_than_min_items_decide_nothing():
    n = MIN_ITEMS - 1
    res = preflight_from_outcomes([0.0] * n, [[1.0] * 4 + [0.0] * 4] * n, group_size=8, max_new_tokens=12)
    assert all(m.verdict == CANT_TELL for m in res.methods if not m.rests_on.startswith("the task's items"))
    assert "would be 'indicated'" in res.methods[0].note


def test_saturated_and_no_signal():
    res = preflight_from_outcomes([1.0] * 100, [[1.0] * 8] * 100, group_size=8, max_new_tokens=12)
    assert res.verdict() == NOT_INDICATED and "saturated" in res.methods[0].note
    # the answer appears in failed responses, but no sample ever succeeds: no group has signal
    res = preflight_from_outcomes([0.0] * 128, [[0.0] * 8] * 128, group_size=8, max_new_tokens=12,
                                  greedy_answer_seen=[True] * 128, greedy_reasons=[UNPARSED] * 128)
    assert res.stats.reachable.value == 1.0
    assert res.verdict() == NOT_INDICATED and "no signal" in res.methods[0].note


def test_reach_with_sparse_signal_is_indicated_with_a_note():
    # SmolLM2 on 2-digit + 1-digit sums (docs/results/preflight_calibration.md): the answer is in 25% of
    # the items' failed responses and only 1 item in 47 has a sample that succeeds; GRPO gained 27 points
    n = 47
    rewards = [[1.0] + [0.0] * 7] + [[0.0] * 8] * (n - 1)
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=12,
                                  greedy_answer_seen=[i < 12 for i in range(n)])
    assert res.stats.reachable.low > 0.05 and res.stats.mixed_items.value < 0.05
    assert res.verdict() == INDICATED and "sparse signal" in res.methods[0].note
    # no item with a successful sample at all: nothing to learn from, whatever is within reach
    res = preflight_from_outcomes([0.0] * n, [[0.0] * 8] * n, group_size=8, max_new_tokens=12,
                                  greedy_answer_seen=[i < 12 for i in range(n)])
    assert res.verdict() == CANT_TELL  # 0/47 items with signal: the interval still reaches 7.6%


def test_dynamic_sampling_follows_the_all_equal_share():
    # half the items are solved by every sample (all-equal groups), half by half of them (mixed)
    n = 64
    rewards = [[1.0] * 8 if i % 2 else [1.0] * 4 + [0.0] * 4 for i in range(n)]
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=12)
    ds = next(m for m in res.methods if m.id == "dynamic_sampling")
    assert res.stats.all_equal.value == pytest.approx(0.5) and ds.verdict == INDICATED
    assert "rollout.dynamic_sampling=true" in ds.set_lines
    mixed = [[1.0] * 4 + [0.0] * 4] * n  # every group has signal: nothing to drop
    res = preflight_from_outcomes([0.0] * n, mixed, group_size=8, max_new_tokens=12)
    assert next(m for m in res.methods if m.id == "dynamic_sampling").verdict == NOT_INDICATED


def test_readability_length_and_ratio_rows():
    n = 32
    rewards = [[1.0] * 4 + [0.0] * 4] * n
    lengths = [[10] * 4 + [20] * 4] * n  # failures twice as long within every group
    read = {"teacher_auc": 0.95, "response_auc": 0.9, "wrong_responses_localised": 120, "tokens_before": 600,
            "rederivable": True, "error_auc": 0.95, "error_auc_interval": [0.9, 0.98],
            "error_counts": {"error": 40, "reworded": 30}}
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=256, sampled_lengths=lengths,
                                  readability=read, has_privileged=True, off_policy=False)
    rows = {m.id: m for m in res.methods}
    assert rows["credit"].verdict == INDICATED and "credit.name=rlsd" in rows["credit"].set_lines
    assert rows["balanced"].verdict == INDICATED  # ratio 2.0 over 32 groups
    assert rows["ratio"].verdict == NOT_INDICATED and "on-policy" in rows["ratio"].rests_on
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=256, sampled_lengths=[[200] * 8] * n,
                                  readability={**read, "error_auc": 0.6, "error_auc_interval": [0.5, 0.7]},
                                  has_privileged=True, off_policy=True)
    rows = {m.id: m for m in res.methods}
    assert rows["credit"].verdict == NOT_INDICATED
    assert rows["balanced"].verdict == NOT_INDICATED  # ratio 1.0
    assert rows["ratio"].verdict == INDICATED and rows["ratio"].set_lines == ["preset=gspo"]
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=12)
    assert res.verdict("credit") == NOT_INDICATED  # no privileged text


def test_families_get_their_own_verdict_with_sample_size():
    n = 64
    fam = ["family=a"] * 32 + ["family=b"] * 32
    rewards = [[1.0] * 4 + [0.0] * 4] * 32 + [[0.0] * 8] * 32
    res = preflight_from_outcomes([0.0] * n, rewards, group_size=8, max_new_tokens=12, families=fam)
    assert res.families["family=a"].verdict == INDICATED and res.families["family=a"].headroom.n_items == 32
    assert res.families["family=b"].verdict == CANT_TELL  # 0/32: upper 10.7% > 5%
    d = res.to_dict()
    assert d["calibration"]["grpo"] == INDICATED and d["families"]["family=b"]["n_items"] == 32


def test_verdicts_from_recorded_counts():
    v = verdicts_from_counts(128, 46, 96, k=8)  # tiny arith, docs/results/headroom.md (0.359 / 0.750)
    assert v["grpo"] == INDICATED and v["reachable"] == pytest.approx(50 / 128)
    v = verdicts_from_counts(256, 2, 6, k=8)  # 3-digit operands: pass@8 0.023
    assert v["grpo"] == NOT_INDICATED
    assert verdicts_from_counts(4, 0, 0, k=8)["grpo"] == CANT_TELL
    with pytest.raises(ValueError):
        verdicts_from_counts(4, 5, 0, k=8)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="one greedy reward"):
        preflight_from_outcomes([], [], group_size=8, max_new_tokens=4)
    with pytest.raises(ValueError, match="same number"):
        preflight_from_outcomes([0.0, 1.0], [[1.0], [1.0, 0.0]], group_size=8, max_new_tokens=4)


def _credit_row(read):
    n = 32
    res = preflight_from_outcomes([0.0] * n, [[1.0] * 4 + [0.0] * 4] * n, group_size=8, max_new_tokens=256,
                                  readability=read, has_privileged=True, off_policy=False)
    return res.method("credit")


def test_the_credit_verdict_names_why_readability_was_not_measured():
    # --no-readability: the line says so and names that flag, not a budget no one set (issue 59 item 5)
    row = _credit_row({"not_measured": "turned off (--no-readability)"})
    assert row.verdict == CANT_TELL and "turned off (--no-readability)" in row.rests_on
    assert "without --no-readability" in row.note and "budget" not in row.note
    # the budget stopped it: the fix is a looser budget
    row = _credit_row({"not_measured": "the budget stopped before a first chunk of >= 4 items"})
    assert row.verdict == CANT_TELL and "without a tight --budget" in row.note
    row = _credit_row(None)  # a record from before the reason was kept: the budget, as it was then
    assert "budget" in row.rests_on and "without a tight --budget" in row.note
    # measured but nothing localised: neither flag nor budget is the fix
    row = _credit_row({"teacher_auc": None, "rederivable": False})
    assert row.verdict == CANT_TELL and "undefined" in row.rests_on and "budget" not in row.note


def test_the_credit_verdict_rests_on_the_error_auc_not_on_copying():
    # a copier of the reference: the first-departure AUC is ~1 by construction, the error AUC is chance
    copier = {"teacher_auc": 0.99, "wrong_responses_localised": 120, "tokens_before": 600, "rederivable": True,
              "error_auc": 0.52, "error_auc_interval": [0.41, 0.63], "error_counts": {"error": 40, "reworded": 25}}
    row = _credit_row(copier)
    assert row.verdict == NOT_INDICATED and not row.set_lines
    assert "error AUC 0.520 [0.410, 0.630]" in row.rests_on and "first-departure AUC 0.990" in row.rests_on
    # a task whose answers cannot be re-derived: the old AUC alone decides nothing
    row = _credit_row({"teacher_auc": 0.99, "wrong_responses_localised": 120, "tokens_before": 600,
                       "rederivable": False})
    assert row.verdict == CANT_TELL and "cannot tell an error from a correct rewording" in row.note
    # re-derivable but too few reworded-correct responses for an interval
    row = _credit_row({"teacher_auc": 0.8, "rederivable": True, "error_auc": 0.9, "error_auc_interval": None,
                       "error_counts": {"error": 30, "reworded": 1}})
    assert row.verdict == CANT_TELL and "1 reworded-correct" in row.rests_on and "measure more items" in row.note
    # the interval straddles the threshold
    row = _credit_row({"teacher_auc": 0.8, "rederivable": True, "error_auc": 0.82, "error_auc_interval": [0.7, 0.9],
                       "error_counts": {"error": 30, "reworded": 20}})
    assert row.verdict == CANT_TELL
