"""grpolab.diagnostics.readability_errors: the error-readability AUC can fail where the first-departure
AUC cannot (synthetic deltas), its pooled AUC and interval, and the labels on real token ids."""

import math

import pytest
import torch

from grpolab.diagnostics.readability_errors import (
    ResponseLabel,
    char_to_token,
    clustered_auc,
    error_readability,
    gear_departed_mask,
    label_responses,
)
from grpolab.models import build_tokenizer
from grpolab.tasks import TaskItem

T = 24


def _batch(kind: str, n: int = 40, seed: int = 0):
    """``n`` erroneous and ``n`` reworded-correct responses of ``T`` tokens, and a teacher's delta.

    Both kinds depart from the reference at token 6 (a rewording, or the wrong step's first
    token); an erroneous response's first error is token 12 (a rewording first, then the error).
    ``copier``: delta ~ +1 on the reference, ~ -2 from the departure on, wrong or not.
    ``reader``: delta ~ 0 everywhere but ~ -3 at the error token.
    """
    g = torch.Generator().manual_seed(seed)
    delta = torch.randn(2 * n, T, generator=g) * 0.3
    labels = []
    for i in range(2 * n):
        err = i < n
        labels.append(ResponseLabel("error" if err else "reworded", 12 if err else None, 6, not err, T))
        if kind == "copier":
            delta[i, :6] += 1.0
            delta[i, 6:] -= 2.0
        elif err:
            delta[i, 12] -= 3.0
    return delta, labels


def test_a_copier_passes_the_old_measure_and_fails_the_new_one():
    delta, labels = _batch("copier")
    r = error_readability(delta, labels, n_boot=300)
    assert r.auc_first_departure.value > 0.99  # the old label: departure vs the tokens before it
    assert 0.35 < r.auc_error_vs_reworded.value < 0.65  # error tokens look like any departed token
    assert r.auc_error_vs_reworded.low < 0.5 < r.auc_error_vs_reworded.high
    assert r.met is False
    assert r.counts == {"error": 40, "reworded": 40, "verbatim": 0, "unlabelled": 0}
    assert r.error_tokens == 40 and r.reworded_departed_tokens == 40 * (T - 6) and r.correct_tokens == 40 * T


def test_an_error_reader_passes_the_new_measure():
    delta, labels = _batch("reader")
    r = error_readability(delta, labels, n_boot=300)
    assert r.auc_error_vs_reworded.value > 0.99 and r.auc_error_vs_reworded.low > 0.9
    assert r.auc_error_vs_correct.value > 0.99
    assert r.met is True
    # the old label sits at the departure (token 6), where this teacher sees nothing wrong
    assert 0.3 < r.auc_first_departure.value < 0.7
    assert r.mean_delta_error < -2.0 and abs(r.mean_delta_reworded_departed) < 0.1


def _brute(pos, neg):
    return sum((n > p) + 0.5 * (n == p) for p in pos for n in neg) / (len(pos) * len(neg))


def test_clustered_auc_pools_like_the_pairwise_count():
    units = [([0.0], [1.0, -1.0]), ([2.0], []), ([], [1.0, 2.0, 3.0]), ([], [0.0])]
    pos = [0.0, 2.0]
    neg = [1.0, -1.0, 1.0, 2.0, 3.0, 0.0]
    # by hand: p=0 -> beaten by 1, 1, 2, 3 (4) and tied with 0 (0.5); p=2 -> beaten by 3 (1), tied 2 (0.5)
    assert _brute(pos, neg) == pytest.approx(6.0 / 12)
    r = clustered_auc(units)
    assert r.value == pytest.approx(0.5) and r.n == 4
    assert math.isnan(r.low) and math.isnan(r.high)  # 4 responses: too few for a bootstrap
    assert clustered_auc([([1.0], [])]) is None and clustered_auc([([], [1.0])]) is None
    # 30 errors but one reworded response: no interval (its spread over responses is unknown)
    one_neg = [([float(i)], []) for i in range(30)] + [([], [0.5, 1.5, 40.0])]
    r = clustered_auc(one_neg)
    assert r.value == pytest.approx((3 + 2 + 28) / 90) and math.isnan(r.low)  # p=0: 3 above, p=1: 2, p>=2: 40 only


def test_repeating_a_responses_tokens_does_not_shrink_the_interval():
    # the same 40 responses with 24 or with 240 tokens each: tokens within a response are one unit
    g = torch.Generator().manual_seed(1)
    short = [([float(torch.randn(1, generator=g)) - 1.0], []) for _ in range(20)]
    short += [([], (torch.randn(24, generator=g) + float(torch.randn(1, generator=g))).tolist()) for _ in range(20)]
    long_ = short[:20] + [([], n * 10) for _, n in short[20:]]
    a, b = clustered_auc(short, n_boot=400), clustered_auc(long_, n_boot=400)
    assert a.value == pytest.approx(b.value)
    assert (b.high - b.low) > 0.8 * (a.high - a.low)  # repeating tokens does not shrink it


def test_gear_share_of_correct_tokens():
    delta = torch.zeros(2, 8)
    delta[0, 3] = -5.0  # a departure spike in a correct response: GEAR's segment runs to the end
    mask = torch.ones(2, 8)
    seg = gear_departed_mask(delta, mask)
    assert seg[0].tolist() == [False] * 3 + [True] * 5 and not seg[1].any()
    labels = [ResponseLabel("reworded", None, 3, True, 8), ResponseLabel("verbatim", None, None, True, 8)]
    r = error_readability(delta, labels, gear_mask=seg, n_boot=10)
    assert r.gear_departed_share_correct == pytest.approx(5 / 16)
    boundary = torch.zeros(2, 8, dtype=torch.bool)
    boundary[0, 5] = True  # a line end closes the segment after token 5
    assert gear_departed_mask(delta, mask, boundary_mask=boundary)[0].tolist() == [False] * 3 + [True] * 3 + [False] * 2


def test_labels_on_real_token_ids():
    tok = build_tokenizer()  # one token per character
    item = TaskItem(prompt="7+5-3=", reference="9", demonstration="7+5=12;12-3=9#9", privileged="7+5=12;12-3=9#9")
    texts = ["7+5=12;12-3=9#9", "7+5=13;13-3=10#10", "7+5=12;12-", "7+5=12;12-3=9#8"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    L = max(map(len, ids))
    rid = torch.tensor([x + [0] * (L - len(x)) for x in ids])
    mask = torch.tensor([[1] * len(x) + [0] * (L - len(x)) for x in ids])
    labels = label_responses(tok, rid, mask, [item], 4, [True, False, False, False],
                             [True, True, False, True], "arith")
    assert [lab.category for lab in labels] == ["verbatim", "error", "unlabelled", "error"]
    assert labels[1].error_token == 5 and labels[1].departure_token == 5  # the 3 of 13
    assert labels[3].error_token == 14 and labels[3].rederivation.error_kind == "final"
    assert char_to_token(tok, ids[0], 4) == 4 and char_to_token(tok, ids[0], 99) is None


def test_a_length_mismatch_names_the_problem():
    with pytest.raises(ValueError, match="2 labels for 3 rows"):
        error_readability(torch.zeros(3, 4), [ResponseLabel("verbatim", None, None, True, 4)] * 2)
