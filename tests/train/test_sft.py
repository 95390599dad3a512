"""Supervised warm start: learning-rate schedule, early stop at the target, config validation."""

import pytest

from grpolab.config import ConfigError, load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.train.sft import run_sft


def _setup():
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    task = get_task("arith")
    return model, tok, task.items("train", 64), task.items("eval", 8)


@pytest.mark.parametrize("schedule,factors", [
    ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("linear", [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]),
    ("cosine", [0.5, 1.0, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627]),
])
def test_sft_lr_schedule(schedule, factors):
    model, tok, train, held = _setup()
    res = run_sft(model, tok, train, held, max_steps=6, batch_size=4, lr=1e-3, target_accuracy=1.0,
                  eval_every=1, max_new_tokens=4, schedule=schedule, warmup_steps=2, log=lambda s: None)
    assert res.steps == 6
    assert [h["step"] for h in res.history] == [1, 2, 3, 4, 5, 6]
    assert [h["lr"] for h in res.history] == pytest.approx([1e-3 * f for f in factors], rel=1e-9)


def test_sft_stops_at_target_before_training():
    model, tok, train, held = _setup()
    res = run_sft(model, tok, train, held, max_steps=5, batch_size=4, lr=1e-3, target_accuracy=0.0,
                  eval_every=1, max_new_tokens=4, log=lambda s: None)
    assert res.steps == 0 and res.history == []


def test_sft_schedule_validated():
    with pytest.raises(ConfigError, match="sft.schedule"):
        load_config(overrides={"sft.schedule": "exponential"})


def test_weight_average_matches_formula_and_swap_restores():
    import torch

    from grpolab.train.sft import _WeightAverage

    lin = torch.nn.Linear(3, 2)
    w0 = [p.detach().double().clone() for p in lin.parameters()]
    avg = _WeightAverage(lin, 0.9)
    expected = w0
    g = torch.Generator().manual_seed(0)
    for step in range(1, 8):
        with torch.no_grad():
            for p in lin.parameters():
                p.add_(torch.randn(p.shape, generator=g))
        avg.update(step)
        d = min(0.9, (1 + step) / (10 + step))
        expected = [d * e + (1 - d) * p.detach().double() for e, p in zip(expected, lin.parameters())]
    for a, e in zip(avg.avg, expected):
        assert torch.allclose(a.double(), e, atol=1e-6)
    raw = [p.detach().clone() for p in lin.parameters()]
    with avg.swapped_in():
        for p, e in zip(lin.parameters(), expected):
            assert torch.allclose(p.double(), e, atol=1e-6)
    for p, r in zip(lin.parameters(), raw):  # raw weights back, bit for bit
        assert torch.equal(p, r)
    avg.copy_to_model()
    for p, a in zip(lin.parameters(), avg.avg):
        assert torch.equal(p, a)
    with pytest.raises(ValueError, match="ema"):
        _WeightAverage(lin, 1.0)


def test_sft_with_ema_trains_the_same_raw_trajectory_and_returns_the_average(monkeypatch):
    import torch

    import grpolab.train.sft as sft

    seen = []

    class Recording(sft._WeightAverage):
        def copy_to_model(self):
            seen.append(([p.detach().clone() for p in self.params], [a.clone() for a in self.avg]))
            super().copy_to_model()

    monkeypatch.setattr(sft, "_WeightAverage", Recording)
    finals = {}
    for ema in (0.0, 0.5):
        model, tok, train, held = _setup()
        run_sft(model, tok, train, held, max_steps=4, batch_size=4, lr=1e-2, target_accuracy=1.0,
                eval_every=2, max_new_tokens=4, ema=ema, log=lambda s: None)
        finals[ema] = [p.detach().clone() for p in model.parameters()]
    assert len(seen) == 3  # two checks with the average swapped in, then the final copy
    raw_before_final, avg_final = seen[-1]
    # evaluating with the average swapped in leaves training untouched: the raw weights are
    # exactly those of a run without averaging ...
    assert all(torch.equal(a, b) for a, b in zip(raw_before_final, finals[0.0]))
    # ... and the returned model is the average, which differs from the raw weights
    assert all(torch.equal(a, b) for a, b in zip(avg_final, finals[0.5]))
    assert any(not torch.equal(a, b) for a, b in zip(finals[0.0], finals[0.5]))


def test_sft_ema_validated():
    with pytest.raises(ConfigError, match="sft.ema"):
        load_config(overrides={"sft.ema": "1.5"})


def test_warm_start_selects_on_validation_items_not_the_test_set():
    from grpolab.train.setup import build_task_splits, sft_selection_split

    cfg = load_config(None, ["task.n_train=400", "task.n_eval=50", "sft.n_eval=64"])
    train, held = build_task_splits(cfg.task)
    demos, select = sft_selection_split(cfg, train, held)
    assert len(select) == 64 and len(demos) == 400 - 64
    prompts = lambda items: {it.prompt for it in items}  # noqa: E731
    assert prompts(select) == prompts(train[-64:])
    assert not prompts(select) & prompts(demos)  # never trained on
    assert not prompts(select) & prompts(held)  # the test set plays no part in choosing the warm start
    # at most a quarter of a small training split is held back
    cfg_small = load_config(None, ["task.n_train=40", "sft.n_eval=64"])
    train_s, held_s = build_task_splits(cfg_small.task)
    demos_s, select_s = sft_selection_split(cfg_small, train_s, held_s)
    assert len(select_s) == 10 and len(demos_s) == 30
    # the pre-2026-12-01 behaviour, kept to reproduce old warm starts
    cfg_old = load_config(None, ["task.n_train=400", "task.n_eval=50", "sft.n_eval=32", "sft.select_on=heldout"])
    demos_o, select_o = sft_selection_split(cfg_old, train, held)
    assert demos_o == train and select_o == held[:32]


def test_warm_start_validation_needs_training_items():
    from grpolab.train.setup import sft_selection_split

    cfg = load_config(None, ["task.n_train=3", "rollout.prompts_per_step=2"])
    train = get_task("arith").items("train", 3)
    with pytest.raises(ConfigError, match="sft.select_on=heldout"):
        sft_selection_split(cfg, train, train)
    with pytest.raises(ConfigError, match="sft.select_on"):
        load_config(None, ["sft.select_on=test"])
