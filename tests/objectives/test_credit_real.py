"""GEAR's anchor rule on SmolLM2-135M-Instruct's own responses (issue 44).

The fixture (tests/objectives/data/smollm2_short_answers.pt, 18 KB) holds 64 responses SmolLM2
sampled to 8 sums of studies/real_credit.yaml (8 samples each, T = 0.7, 12-token cap), with the
sampled tokens' log-probs under the student and under the teacher shown the worked solution
(template user_bare), the full-vocabulary KL, the GEAR boundary tokens and the rewards. Made by:

    python benchmarks/experiments/real_credit_reads.py fixture --model models/smollm2-135m-instruct \
        --prompts 8 --out tests/objectives/data/smollm2_short_answers.pt

On these 12-token answers the spike rule put 95% of all tokens and every token of every correct
response in a segment (docs/results/real_credit.md measured 96-97% in training); the departure rule
(docs/credit.md, "GEAR's anchors") marks 7.6% of the correct responses' tokens and 64% of the
wrong ones'.

A second fixture (tests/objectives/data/smollm2_worked.pt, 67 KB) holds 64 worked responses (47.6
tokens on average) of the warm start whose teacher reads (docs/results/real_credit_reads.md):

    python benchmarks/experiments/real_credit_reads.py fixture --model runs/reads_ws_ps50 \
        --config studies/real_credit_reads.yaml --prompts 8 --out tests/objectives/data/smollm2_worked.pt

There the spike rule puts 95% of the correct responses' tokens in segments and 16 of 27 correct
responses whole; the departure rule 50% and none whole (wrong responses: 75%).
"""

from pathlib import Path

import pytest
import torch

from grpolab.objectives import gear_advantages

from .helpers import poison, t64
from .reference import ref_gear

FIXTURE = Path(__file__).parent / "data" / "smollm2_short_answers.pt"
WORKED = Path(__file__).parent / "data" / "smollm2_worked.pt"


def _load(path):
    d = torch.load(path, weights_only=False)
    return {"adv": d["advantages"].double(), "student": d["student_logp"].double(),
            "teacher": d["teacher_logp"].double(), "kl": d["kl"].double(), "mask": d["mask"].double(),
            "boundary": d["boundary"].double(), "correct": d["rewards"] >= 1.0, "texts": d["texts"]}


@pytest.fixture(scope="module")
def real():
    return _load(FIXTURE)


@pytest.fixture(scope="module", params=[FIXTURE, WORKED], ids=["short_answers", "worked"])
def any_real(request):
    return _load(request.param)


def _gear(b, **kw):
    return gear_advantages(b["adv"], b["student"], b["teacher"], b["mask"], divergence=b["kl"],
                           boundary_mask=b["boundary"], **kw)


def _frac_in_segments(res, b, rows):
    m = b["mask"].bool() & rows[:, None]
    return float((res.segment_ids > 0)[m].float().mean())


def test_the_fixture_is_what_it_says():
    d = torch.load(FIXTURE, weights_only=False)
    assert d["mask"].shape == (64, 12) and len(d["texts"]) == 64
    assert d["about"]["template"] == "user_bare" and d["about"]["group_size"] == 8
    correct = d["rewards"] >= 1.0
    assert 1 <= int(correct.sum()) < 64  # both kinds, so the advantages are not all zero
    assert (d["kl"][d["mask"].bool()] >= -1e-6).all()


@pytest.mark.parametrize("anchor", ["departure", "spike"])
def test_gear_matches_the_loop_on_real_responses(any_real, anchor):
    real = any_real
    got = _gear(real, anchor=anchor)
    ref = ref_gear(real["adv"], real["student"], real["teacher"], real["mask"], divergence=real["kl"],
                   boundary_mask=real["boundary"], anchor=anchor)
    assert got.segment_ids.tolist() == ref["segment_ids"]
    assert got.anchors.tolist() == ref["anchors"]
    torch.testing.assert_close(got.advantages, t64(ref["advantages"]), atol=1e-12, rtol=0)


def test_the_departure_rule_does_not_mark_correct_responses_as_departed(real):
    correct, wrong = real["correct"], ~real["correct"]
    spike = _gear(real, anchor="spike")
    dep = _gear(real)
    # the earlier rule: (nearly) everything in a segment, every correct response entirely
    assert _frac_in_segments(spike, real, correct) > 0.95
    assert _frac_in_segments(spike, real, torch.ones_like(correct)) > 0.9
    # the departure rule: a small share of the correct responses' tokens, no correct response whole
    assert _frac_in_segments(dep, real, correct) < 0.2
    m = real["mask"].bool()
    whole = ((dep.segment_ids > 0) | ~m).all(-1)
    assert not whole[correct].any()
    # ... while the wrong responses keep segments (GEAR still blames a continuation that departs)
    assert _frac_in_segments(dep, real, wrong) > 0.4
    assert _frac_in_segments(dep, real, wrong) > 3 * _frac_in_segments(dep, real, correct)
    # every anchor is a token the teacher finds less than half as likely as the student does
    delta = real["teacher"] - real["student"]
    assert (delta[dep.anchors] < -0.6931).all()


def test_on_worked_responses_no_correct_response_is_marked_whole():
    """Long worked responses (issue 44, part 2: 'GEAR where answers are short or long')."""
    d = torch.load(WORKED, weights_only=False)
    assert d["mask"].shape == (64, 64) and float(d["mask"].sum(-1).float().mean()) >= 30
    assert d["about"]["model"] == "runs/reads_ws_ps50" and d["about"]["template"] == "user_bare"
    real = _load(WORKED)
    correct, wrong = real["correct"], ~real["correct"]
    assert 1 <= int(correct.sum()) < 64
    m = real["mask"].bool()
    spike, dep = _gear(real, anchor="spike"), _gear(real)
    whole = lambda res: ((res.segment_ids > 0) | ~m).all(-1)  # noqa: E731
    # the spike rule: nearly every token in a segment, most correct responses entirely
    assert _frac_in_segments(spike, real, correct) > 0.9 and int(whole(spike)[correct].sum()) >= 10
    # the departure rule: no correct response whole, and fewer of their tokens than of the wrong ones'
    assert not whole(dep)[correct].any()
    assert _frac_in_segments(dep, real, correct) < 0.6
    assert _frac_in_segments(dep, real, wrong) > _frac_in_segments(dep, real, correct) + 0.15
    delta = real["teacher"] - real["student"]
    assert (delta[dep.anchors] < -0.6931).all()


@pytest.mark.parametrize("value", [float("nan"), 1e9])
def test_poisoned_padding_on_real_responses(any_real, value):
    real = any_real
    # shorter responses leave padding: filling it with garbage changes nothing
    m = real["mask"]
    assert (m == 0).any()
    clean = _gear(real)
    bad = dict(real)
    for k in ("adv", "student", "teacher", "kl"):
        bad[k] = poison(real[k], m, value) if real[k].dim() == 2 else real[k]
    pois = _gear(bad)
    assert torch.equal(pois.advantages, clean.advantages) and torch.equal(pois.segment_ids, clean.segment_ids)


@pytest.mark.parametrize("anchor", ["departure", "spike"])
def test_the_config_setting_picks_the_rule(real, anchor):
    """``credit.gear_anchor`` / ``credit.gear_min_drop`` reach GEAR through ``method_kwargs``,
    the path the trainer, the TRL adapter and the verl plug-in share."""
    from grpolab.config import CreditConfig
    from grpolab.objectives import credit_advantages

    cfg = CreditConfig(name="gear", gear_anchor=anchor).validate("credit.")
    got = credit_advantages("gear", real["adv"], real["student"], real["teacher"], real["mask"],
                            divergence=real["kl"], boundary_mask=real["boundary"], lam=cfg.lam,
                            **cfg.method_kwargs())
    want = _gear(real, anchor=anchor)
    assert got.segment_ids.tolist() == want.segment_ids.tolist()
    other = _gear(real, anchor="spike" if anchor == "departure" else "departure")
    assert got.segment_ids.tolist() != other.segment_ids.tolist()  # the setting matters here
    # a larger drop needs a clearer departure: fewer anchors than ln 2
    strict = CreditConfig(name="gear", gear_min_drop=3.0).validate("credit.")
    few = credit_advantages("gear", real["adv"], real["student"], real["teacher"], real["mask"],
                            divergence=real["kl"], boundary_mask=real["boundary"], lam=strict.lam,
                            **strict.method_kwargs())
    assert 0 < (few.segment_ids > 0).sum() < (_gear(real).segment_ids > 0).sum()


def test_bad_anchor_settings_are_refused_naming_the_key():
    from grpolab.config import ConfigError, CreditConfig

    for bad, key in ((dict(gear_anchor="onset"), "credit.gear_anchor"),
                     (dict(gear_min_drop=-0.1), "credit.gear_min_drop"),
                     (dict(gear_min_drop=float("nan")), "credit.gear_min_drop")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            CreditConfig(name="gear", **bad).validate("credit.")
