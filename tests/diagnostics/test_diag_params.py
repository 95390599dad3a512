"""Drift per group and exact revert / transplant of parameter groups."""

import pytest
import torch

from grpolab.diagnostics import parameter_drift, parameter_state, swap_in, swapped
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, parameter_groups


def test_drift_hand_case():
    base = {"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.0, 2.0])}
    trained = {"a": torch.tensor([6.0, 8.0]), "b": torch.tensor([0.0, 1.0])}
    # a: delta (3, 4), |delta| = 5, |W0| = 5 -> relative 1; b: |delta| = 1, |W0| = 2 -> 0.5
    # total squared movement 25 + 1 = 26
    d = {g.group: g for g in parameter_drift(base, trained, {"A": ["a"], "B": ["b"], "AB": ["a", "b"]})}
    assert d["A"].relative == pytest.approx(1.0) and d["A"].share == pytest.approx(25 / 26)
    assert d["B"].relative == pytest.approx(0.5) and d["B"].share == pytest.approx(1 / 26)
    assert d["AB"].relative == pytest.approx((26 / 29) ** 0.5) and d["AB"].share == pytest.approx(1.0)
    assert d["AB"].n_params == 4
    with pytest.raises(ValueError, match="unknown parameters"):
        parameter_drift(base, trained, {"C": ["c"]})


def _pair():
    tok = build_tokenizer()
    cfg = TinyModelConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32)
    return build_tiny_model(tok, cfg, seed=0), build_tiny_model(tok, cfg, seed=1)


def test_revert_and_transplant_are_exact_and_restored():
    base, trained = _pair()
    W0, W1 = parameter_state(base), parameter_state(trained)
    groups = parameter_groups(trained)
    names = groups["attention"]
    others = [n for n in W1 if n not in names]
    with swapped(trained, W0, names):  # revert attention
        now = parameter_state(trained)
        assert all(torch.equal(now[n], W0[n]) for n in names)
        assert all(torch.equal(now[n], W1[n]) for n in others)
    after = parameter_state(trained)
    assert all(torch.equal(after[n], W1[n]) for n in W1)  # bit-identical restore
    with swapped(base, W1, groups["mlp"]):  # transplant mlp
        now = parameter_state(base)
        assert all(torch.equal(now[n], W1[n]) for n in groups["mlp"])
        assert all(torch.equal(now[n], W0[n]) for n in W0 if n not in groups["mlp"])
    assert all(torch.equal(parameter_state(base)[n], W0[n]) for n in W0)


def test_swapped_restores_on_error_and_full_revert_gives_base_outputs():
    base, trained = _pair()
    W0, W1 = parameter_state(base), parameter_state(trained)
    with pytest.raises(RuntimeError):
        with swapped(trained, W0, list(W0)):
            raise RuntimeError("boom")
    assert all(torch.equal(parameter_state(trained)[n], W1[n]) for n in W1)
    ids = torch.randint(5, 20, (2, 5))
    swap_in(trained, W0, list(W0))  # every group reverted = the base model
    assert torch.equal(trained(input_ids=ids).logits, base(input_ids=ids).logits)
    with pytest.raises(KeyError, match="no parameter"):
        swap_in(trained, W0, ["nope"])
