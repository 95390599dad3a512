"""The precondition measurements of issue 16 (benchmarks/credit.py signal, benchmarks/preconditions.py),
against hand-computed cases."""

import importlib.util
from pathlib import Path

import pytest
import torch

from grpolab.models import build_tokenizer
from grpolab.tasks import TaskItem

_ROOT = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _ROOT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


credit = _load("credit")
preconditions = _load("preconditions")


def _enc(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_first_wrong_token_against_hand_cases():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    ref = "7+5=12;12-3=9#9"
    assert credit.first_wrong_token(tok, _enc(tok, ref) + [eos], ref) is None  # exactly the solution
    assert credit.first_wrong_token(tok, _enc(tok, "7+5=13;13-3=10#10") + [eos], ref) == 5  # the '3' of 13
    assert credit.first_wrong_token(tok, _enc(tok, "7+5=12") + [eos], ref) == 6  # stops early: EOS is wrong
    assert credit.first_wrong_token(tok, _enc(tok, ref + "9") + [eos], ref) == len(ref)  # runs on


def test_localisation_means_before_at_and_after():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    item = TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3", privileged="1+2=3#3")
    rows = [_enc(tok, "1+2=4#4") + [eos], _enc(tok, "1+2=3#3") + [eos]]
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    delta = torch.zeros(2, T)
    delta[0, :4] = 1.0      # before the first wrong token (index 4, the '4')
    delta[0, 4] = -3.0      # at it
    delta[0, 5:8] = -1.0    # after it: '#', '4', EOS
    delta[1] = 7.0          # a correct row: ignored
    res = credit.localisation(tok, ids, mask, delta, [item], 2, torch.tensor([True, False]))
    assert res["wrong_responses_localised"] == 1 and res["tokens_before"] == 4
    assert res["delta_before_first_wrong"] == pytest.approx(1.0)
    assert res["delta_at_first_wrong"] == pytest.approx(-3.0)
    assert res["delta_after_first_wrong"] == pytest.approx(-1.0)
    assert res["frac_at_below_before_mean"] == 1.0


def test_auc_hand_values():
    assert credit._auc([2.0, 3.0], [1.0]) == 1.0
    assert credit._auc([1.0], [1.0, 2.0]) == pytest.approx(0.25)  # a tie counts half, a loss 0


def test_length_coupling_is_within_groups():
    # group 1 (mixed): failures 20 and 10 (mean 15), successes 10 and 10 (mean 10)
    # group 2 (all correct): ignored by the within-group ratio, used by the pooled one
    lengths = [10, 20, 10, 10, 5, 5, 5, 5]
    correct = [True, False, True, False, True, True, True, True]
    res = preconditions.length_coupling(lengths, correct, 4)
    assert res["mixed_groups"] == 1
    assert res["fail_success_length_ratio"] == pytest.approx(15 / 10)
    # pooled: failures mean 15, successes (10+10+5*4)/6
    assert res["pooled_fail_success_ratio"] == pytest.approx(15 / (40 / 6))
    assert res["mean_response_tokens"] == pytest.approx(70 / 8)
    assert res["fail_longer_frac"] == 0.5 and res["fail_shorter_frac"] == 0.0  # 20 > 10, 10 == 10
    none = preconditions.length_coupling([5, 6], [True, True], 2)
    assert none["fail_success_length_ratio"] is None and none["mixed_groups"] == 0
