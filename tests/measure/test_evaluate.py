"""Evaluation (grpolab.measure.evaluate): pass@k by hand, and samples grouped by the collector's
row -> item index."""

import math

import pytest

from grpolab.measure.evaluate import pass_at_k


def test_pass_at_k_hand_values():
    # n=5, c=2, k=1: 1 - C(3,1)/C(5,1) = 1 - 3/5 = 0.4
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4, abs=1e-12)
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7, abs=1e-12)
    # n=4, c=1, k=4: every draw of 4 contains the correct one
    assert pass_at_k(4, 1, 4) == 1.0
    assert pass_at_k(10, 0, 3) == 0.0
    # brute force against math.comb on a grid
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exp = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exp, abs=1e-12)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 5)


def test_evaluate_groups_samples_by_the_collectors_item_index():
    """pass@k counts each item's own samples through the experience's row -> item index, not by
    position: the real collector's rows, scored by item (even items always solved, odd never), give
    the same per-item counts whether they come back in order or reversed."""
    import torch

    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.tasks import get_task
    from grpolab.rollout.collector import make_collector
    from grpolab.measure.evaluate import evaluate

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    items = get_task("arith", seed=0).items("eval", 5)
    real = make_collector(tok, max_new_tokens=4)

    class ScoredByItem:
        def __init__(self, reverse: bool):
            self.reverse = reverse

        def collect(self, model, batch, **kw):
            exp = real.collect(model, batch, **kw)
            rows = torch.arange(exp.batch_size)
            if self.reverse:
                rows = rows.flip(0)
            rollout = exp.rollout.select(rows)
            item_no = [items.index(batch[int(g)]) for g in rollout.group_ids.tolist()]
            return exp.replace(rollout=rollout, texts=[exp.texts[int(r)] for r in rows],
                               rewards=torch.tensor([1.0 if j % 2 == 0 else 0.0 for j in item_no]))

    for reverse in (False, True):
        res = evaluate(model, tok, items, greedy=False, samples=4, max_new_tokens=4, batch_size=8,
                       generator=torch.Generator().manual_seed(0), collector=ScoredByItem(reverse))
        assert res.solved_per_item() == [4, 0, 4, 0, 4], reverse
        assert res.pass_at_k[1] == pytest.approx(0.6) and res.pass_at_k[4] == pytest.approx(0.6)
