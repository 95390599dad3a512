"""Trainer pieces: schedules, atomic checkpoints, metrics log truncation on resume."""

import pytest
import torch

from grpolab.train.checkpoint import latest_checkpoint, rng_state, set_rng_state
from grpolab.train.metrics_log import MetricsLog, read_metrics
from grpolab.train.optim import build_optimizer, build_scheduler


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
