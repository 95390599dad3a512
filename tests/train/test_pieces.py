"""Trainer pieces: pass@k, schedules, atomic checkpoints, metrics log truncation on resume."""

import math

import pytest
import torch

from grpolab.train.checkpoint import latest_checkpoint, rng_state, set_rng_state
from grpolab.train.evaluate import pass_at_k
from grpolab.train.metrics_log import MetricsLog, read_metrics
from grpolab.train.optim import build_optimizer, build_scheduler


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


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_scheduler_warmup_and_decay(schedule):
    model = torch.nn.Linear(2, 2)
    opt = build_optimizer(model, lr=1.0, weight_decay=0.1, betas=(0.9, 0.99))
    sched = build_scheduler(opt, warmup_steps=4, total_steps=14, schedule=schedule)
    lrs = []
    for _ in range(14):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    if schedule == "constant":
        assert lrs[-1] == 1.0
    else:
        assert lrs[-1] < 0.2 and all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    # no weight decay on 1-D parameters (biases)
    assert opt.param_groups[1]["weight_decay"] == 0.0 and opt.param_groups[1]["params"][0].dim() == 1


def test_rng_state_roundtrip():
    g = torch.Generator().manual_seed(3)
    st = rng_state(g)
    a = (torch.rand(3), torch.rand(3, generator=g))
    set_rng_state(st, g)
    b = (torch.rand(3), torch.rand(3, generator=g))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_metrics_log_truncates_on_resume(tmp_path):
    log = MetricsLog(tmp_path, tensorboard=False)
    for s in range(1, 6):
        log.log(s, {"x": float(s), "nan": float("nan"), "vec": torch.tensor([1.0, 2.0])})
    log.close()
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5] and rows[0]["nan"] is None
    assert rows[0]["vec"] == [1.0, 2.0]
    log = MetricsLog(tmp_path, tensorboard=False, resume_step=3)
    log.log(4, {"x": 40.0})
    log.close()
    assert [(r["step"], r["x"]) for r in read_metrics(tmp_path)] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_latest_checkpoint_ignores_incomplete(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "step_000002").mkdir(parents=True)
    (root / "step_000002" / "state.pt").write_bytes(b"x")
    (root / ".tmp-step_000004-1").mkdir()  # a crash mid-write leaves only a hidden temp folder
    (root / "step_000006").mkdir()  # no state.pt: incomplete
    ck = latest_checkpoint(tmp_path)
    assert ck is not None and ck.step == 2
    (root / "latest").write_text("step_000006\n")  # pointer to an incomplete one is not trusted
    assert latest_checkpoint(tmp_path).step == 2


def test_evaluate_groups_samples_by_the_collectors_item_index():
    """pass@k counts each item's own samples through the experience's row -> item index, not by
    position: the real collector's rows, scored by item (even items always solved, odd never), give
    the same per-item counts whether they come back in order or reversed."""
    import torch

    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.tasks import get_task
    from grpolab.train.collector import make_collector
    from grpolab.train.evaluate import evaluate

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
