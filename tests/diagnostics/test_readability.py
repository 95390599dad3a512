"""grpolab.diagnostics.readability (pure) and grpolab.measure.readability (the teacher forward), against
hand-computed cases."""

import pytest
import torch

from grpolab.diagnostics.readability import (
    READABLE_AUC,
    accepted_targets,
    auc,
    first_wrong_token,
    localisation,
    readability,
    response_aucs,
)
from grpolab.models import build_tokenizer
from grpolab.tasks import TaskItem


def _enc(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _brute_auc(pos, neg):
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def test_auc_hand_values_and_ties():
    assert auc([2.0, 3.0], [1.0]) == 1.0
    assert auc([1.0], [1.0, 2.0]) == pytest.approx(0.25)  # a tie counts half, a loss 0
    assert auc([0.0], [1.0]) == 0.0
    # pos [1, 2, 2], neg [2, 0]: 1 beats 0 (1); 2 ties 2, beats 0 (1.5) twice -> 4 / 6
    assert auc([1, 2, 2], [2, 0]) == pytest.approx(4 / 6)
    assert auc([], [1.0]) is None and auc([1.0], []) is None


def test_auc_matches_the_pairwise_count_on_random_scores():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        pos = torch.randint(0, 6, (13,), generator=g).float().tolist()  # many ties
        neg = torch.randint(0, 6, (7,), generator=g).float().tolist()
        assert auc(pos, neg) == pytest.approx(_brute_auc(pos, neg), abs=1e-12)


def test_first_wrong_token_against_hand_cases():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    ref = "7+5=12;12-3=9#9"
    assert first_wrong_token(tok, _enc(tok, ref) + [eos], ref) is None  # exactly the solution
    assert first_wrong_token(tok, _enc(tok, "7+5=13;13-3=10#10") + [eos], ref) == 5  # the '3' of 13
    assert first_wrong_token(tok, _enc(tok, "7+5=12") + [eos], ref) == 6  # stops early: EOS is wrong
    assert first_wrong_token(tok, _enc(tok, ref + "9") + [eos], ref) == len(ref)  # runs on
    assert first_wrong_token(tok, _enc(tok, "7+5"), ref) is None  # cut before it departs


def test_accepted_targets_of_the_final_line_verifier():
    item = TaskItem(prompt="What is 3 + 15?", reference="18", demonstration="18", reward="final_line",
                    reward_options={"expression": "3 + 15"})
    assert accepted_targets(item) == ["18", "Answer: 18", "3 + 15 = 18"]
    assert accepted_targets(TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3")) == ["1+2=3#3"]


def _batch(tok, texts):
    eos = tok.eos_token_id
    rows = [_enc(tok, t) + [eos] for t in texts]
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    return ids, mask


def test_localisation_and_response_auc_by_hand():
    # two prompts x 2 samples; the solution of item 0 is "1+2=3#3", of item 1 "2+2=4#4"
    tok = build_tokenizer()
    items = [TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3", privileged="1+2=3#3"),
             TaskItem(prompt="2+2=", reference="4", demonstration="2+2=4#4", privileged="2+2=4#4")]
    ids, mask = _batch(tok, ["1+2=4#4", "1+2=3#3", "2+5=7#7", "2+2=4#4"])  # wrong, right, wrong, right
    T = ids.shape[1]
    delta = torch.full((4, T), 99.0)  # padding holds garbage: never read
    delta[0, :8] = torch.tensor([1.0, 2.0, 0.0, 1.0, -3.0, -1.0, -1.0, -1.0])  # first wrong at 4 (the '4')
    delta[1, :8] = 0.5
    delta[2, :8] = torch.tensor([0.0, 2.0, 1.0, -2.0, -2.0, -2.0, -2.0, -2.0])  # first wrong at 2 (the '5')
    delta[3, :8] = 0.25
    correct = torch.tensor([False, True, False, True])
    loc = localisation(tok, ids, mask, delta, items, 2, ~correct)
    # before = [1, 2, 0, 1] + [0, 2] (6 tokens), at = [-3, 1]
    assert loc["wrong_responses_localised"] == 2 and loc["tokens_before"] == 6
    assert loc["delta_before_first_wrong"] == pytest.approx(6 / 6)
    assert loc["delta_at_first_wrong"] == pytest.approx(-1.0)
    # after: [-1, -1, -1] and [-2]*5 -> -13 / 8
    assert loc["delta_after_first_wrong"] == pytest.approx(-13 / 8)
    # before over at -3: 6 wins; over 1: 2 and 2 win, 1 and 1 tie -> 2 + 1 = 3; (6 + 3) / 12
    assert loc["auc_first_wrong"] == pytest.approx(9 / 12)
    assert loc["frac_at_below_before_mean"] == 0.5  # -3 < 1, 1 is not < 1
    # response AUC: sums row 0: 1+2+0+1-3-1-1-1 = -2, row 1: 4, row 2: 0+2+1-2*5 = -7, row 3: 2
    res = response_aucs(delta, mask, correct)
    assert res["auc_sum_delta"] == 1.0 and res["auc_mean_delta"] == 1.0
    assert res["mean_delta_correct"] == pytest.approx((0.5 + 0.25) / 2)
    assert res["mean_delta_wrong"] == pytest.approx((-2 / 8 - 7 / 8) / 2)
    assert res["responses"] == 4 and res["correct_frac"] == 0.5
    full = readability(tok, ids, mask, delta, items, 2, correct)
    assert full["teacher_auc"] == pytest.approx(9 / 12) and full["response_auc"] == 1.0
    assert full["mean_response_tokens"] == 8.0
    assert READABLE_AUC == 0.8


def test_padding_is_never_read():
    tok = build_tokenizer()
    items = [TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3", privileged="1+2=3#3")]
    ids, mask = _batch(tok, ["1+2=4#4", "1+2=3"])  # the second is shorter (and stops early: wrong)
    delta = torch.randn(ids.shape, generator=torch.Generator().manual_seed(1))
    poisoned = delta.masked_fill(~mask.bool(), float("nan"))
    a = readability(tok, ids, mask, delta.masked_fill(~mask.bool(), 0.0), items, 2, torch.tensor([False, False]))
    b = readability(tok, ids, mask, poisoned, items, 2, torch.tensor([False, False]))
    assert a == b
    assert a["correct_frac"] == 0.0 and a["auc_sum_delta"] is None  # no correct response: undefined


def test_measure_readability_runs_the_teacher_on_a_tiny_model(tmp_path):
    # the teacher forward of one sampled batch: AUCs in [0, 1] or None, sample sizes consistent, and
    # the delta it rests on is teacher - student of the trainer's teacher prompt
    from grpolab.models import TinyModelConfig, build_tiny_model, save_model
    from grpolab.runs import open_run
    from grpolab.measure.readability import measure_run_readability, sample_responses, teacher_delta

    tok = build_tokenizer()
    save_model(build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=64)), tok, tmp_path / "m")
    opened = open_run(tmp_path / "m", overrides=["rollout.max_new_tokens=8", "rollout.group_size=4",
                                                 "task.n_train=64"], train_items=True, log=lambda *_: None)
    row = measure_run_readability(opened, prompts=3, seed=0)
    assert row["responses"] == 12 and row["prompts"] == 3 and row["group_size"] == 4
    assert row["tokens_before"] >= 0 and row["wrong_responses_localised"] <= 12
    for k in ("teacher_auc", "response_auc"):
        assert row[k] is None or 0.0 <= row[k] <= 1.0
    assert row["met"] is None or row["met"] == (row["teacher_auc"] >= 0.8)
    assert row["mean_kl"] >= 0 and row["placement"] == "plain"
    # the same batch twice (same seed): the same numbers
    exp = sample_responses(opened.collector, opened.model, opened.train_items[:3], group_size=4,
                           temperature=opened.config.rollout.temperature, seed=0)
    d = teacher_delta(opened.model, tok, opened.prompt_format, opened.config.credit, exp,
                      temperature=opened.config.rollout.temperature)
    m = exp.rollout.response_mask.bool()
    assert torch.equal(d["delta"][~m], torch.zeros_like(d["delta"][~m]))
    assert torch.allclose(d["delta"][m], (d["teacher_logp"] - d["student_logp"])[m])
    again = measure_run_readability(opened, prompts=3, seed=0)
    assert again["teacher_auc"] == row["teacher_auc"] and again["response_auc"] == row["response_auc"]
