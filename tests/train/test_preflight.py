"""The headroom check before RL keeps to trainer.headroom_budget: chunks of 8 items, progress lines,
no chunk started that would end past the budget, and the same outcomes as an unbounded check on
the items it did measure."""

import json

import pytest

from grpolab.config import ConfigError, load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.train.headroom import TRAIN_CHECK_CHUNK, run_headroom_check


class FakeClock:
    """Each call advances by `tick` seconds: a chunk's evaluate calls do not call it, so a chunk
    costs exactly the ticks read around it."""

    def __init__(self, tick):
        self.t, self.tick = 0.0, tick

    def __call__(self):
        self.t += self.tick
        return self.t


@pytest.fixture(scope="module")
def policy():
    tok = build_tokenizer()
    return build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=64), seed=0), tok


def _cfg(budget, tmp_path):
    return load_config(None, [f"trainer.headroom_budget={budget}", "rollout.max_new_tokens=8",
                              f"trainer.run_dir={tmp_path}"])


def test_budget_stops_before_an_overrunning_chunk(policy, tmp_path):
    model, tok = policy
    items = get_task("arith").items("eval", 64)
    lines = []
    # every clock read is 10 s later: a chunk costs 10 s (c0 -> after), each loop check 10 s more
    res = run_headroom_check(model, tok, items, _cfg(45, tmp_path), tmp_path, log=lines.append, clock=FakeClock(10))
    progress = [ln for ln in lines if ln.startswith("headroom: ")]
    # t0=10; chunk 1 read c0=20, end 30 (slowest 10), log 40; check at 50: 40 elapsed + 10 > 45 -> stop
    assert progress == [f"headroom: {TRAIN_CHECK_CHUNK}/64 held-out items x 8 samples, 30 s of a 45 s budget"]
    assert "stopped at trainer.headroom_budget=45 s" in lines[-1] and f"({TRAIN_CHECK_CHUNK} held-out items" in lines[-1]
    saved = json.loads((tmp_path / "headroom.json").read_text())
    assert saved["overall"]["n_items"] == TRAIN_CHECK_CHUNK
    assert res.overall.n_items == TRAIN_CHECK_CHUNK


def test_no_budget_measures_all_items_and_a_cut_check_equals_a_check_of_its_prefix(policy, tmp_path):
    model, tok = policy
    items = get_task("arith").items("eval", 64)
    lines = []
    full = run_headroom_check(model, tok, items, _cfg(0, tmp_path), tmp_path, log=lines.append)
    assert sum(ln.startswith("headroom: ") for ln in lines) == 64 // TRAIN_CHECK_CHUNK
    assert full.overall.n_items == 64 and "stopped" not in lines[-1]
    cut = run_headroom_check(model, tok, items, _cfg(45, tmp_path), tmp_path, log=lambda s: None,
                             clock=FakeClock(10))
    prefix = run_headroom_check(model, tok, items[:TRAIN_CHECK_CHUNK], _cfg(0, tmp_path), tmp_path,
                                log=lambda s: None)
    assert cut.overall.to_dict() == prefix.overall.to_dict()  # same items, same sampling stream


@pytest.mark.parametrize("bad", ["-1", "inf", "true", "abc"])
def test_bad_budget_is_refused(bad, tmp_path):
    with pytest.raises(ConfigError, match="trainer.headroom_budget"):
        load_config(None, [f"trainer.headroom_budget={bad}"])
