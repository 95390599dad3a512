"""Effective rank (Roy & Vetterli) of matrices with known spectra."""

import math

import pytest
import torch

from grpolab.diagnostics import effective_rank, hidden_state_effective_ranks


def test_identity_has_full_effective_rank():
    assert effective_rank(torch.eye(7)) == pytest.approx(7.0, abs=1e-10)
    assert effective_rank(torch.eye(3, 5)) == pytest.approx(3.0, abs=1e-10)  # rectangular: min(m, n)


def test_rank_one_matrix():
    u, v = torch.randn(6, 1, dtype=torch.float64), torch.randn(1, 4, dtype=torch.float64)
    assert effective_rank(u @ v) == pytest.approx(1.0, abs=1e-6)


def test_diag_known_singular_values():
    # s = (3, 1): p = (3/4, 1/4); H = -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335; exp(H) = 1.754765
    assert effective_rank(torch.diag(torch.tensor([3.0, 1.0]))) == pytest.approx(1.754765, abs=1e-5)
    # s = (2, 1, 1): p = (1/2, 1/4, 1/4); H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2; exp(H) = 2^1.5
    assert effective_rank(torch.diag(torch.tensor([2.0, 1.0, 1.0]))) == pytest.approx(2 ** 1.5, abs=1e-10)
    # signs do not matter (singular values are |d|)
    assert effective_rank(torch.diag(torch.tensor([-2.0, 1.0, -1.0]))) == pytest.approx(2 ** 1.5, abs=1e-10)


def test_invariant_to_rotations_and_scale():
    torch.manual_seed(0)
    q1, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    d = torch.diag(torch.tensor([5.0, 3.0, 1.0, 0.5, 0.0], dtype=torch.float64))
    s = torch.tensor([5.0, 3.0, 1.0, 0.5], dtype=torch.float64)
    p = s / s.sum()
    expected = math.exp(float(-(p * p.log()).sum()))
    assert effective_rank(q1 @ d @ q2.T) == pytest.approx(expected, abs=1e-9)
    assert effective_rank(10 * (q1 @ d @ q2.T)) == pytest.approx(expected, abs=1e-9)


def test_zero_and_bad_input():
    assert effective_rank(torch.zeros(3, 4)) == 0.0
    with pytest.raises(ValueError, match="2-D"):
        effective_rank(torch.ones(3))
    with pytest.raises(ValueError, match="non-finite"):
        effective_rank(torch.tensor([[1.0, float("nan")]]))


def test_hidden_state_ranks_per_layer():
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=32), seed=0)
    ids = torch.randint(5, 20, (3, 6))
    att = torch.ones_like(ids)
    att[0, :2] = 0  # left padding is ignored
    ranks = hidden_state_effective_ranks(model, ids, att)
    assert len(ranks) == 3  # embeddings + 2 blocks
    assert all(1.0 <= r <= 16 for r in ranks)
