"""The pre-check before RL (the preflight, issue 43) keeps to trainer.preflight_budget: the first chunk is
one item, each next one is sized from the last chunk's cost to end inside the budget, no chunk is
started that would end past it -- even when the first chunk carries a warm-up several times an item's
cost (a 60 s budget had overrun to 68 s on SmolLM2) -- and the measured items give the same outcomes as
an unbounded check of that prefix."""

import json
import random

import pytest

from grpolab.config import ConfigError, load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.rollout.collector import make_collector
from grpolab.measure.preflight import MARGIN, RESERVE_S, BudgetPlanner, PreflightSpec, measure_preflight, run_preflight_check


class Clock:
    """Fake time: reading it costs nothing; the collector below advances it."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


class TimedCollector:
    """The real collector, but each collect call costs ``per_row`` fake seconds per response (times a
    random factor in [1, jitter]), plus ``warmup`` on the very first call."""

    def __init__(self, inner, clock, *, per_row, warmup=0.0, jitter=1.0, seed=0):
        self.inner, self.clock, self.per_row, self.warmup, self.jitter = inner, clock, per_row, warmup, jitter
        self.rng = random.Random(seed)
        self.calls = 0

    def collect(self, model, items, *, group_size, **kw):
        exp = self.inner.collect(model, items, group_size=group_size, **kw)
        self.clock.t += (self.warmup if self.calls == 0 else 0.0) + \
            self.per_row * len(items) * group_size * self.rng.uniform(1.0, self.jitter)
        self.calls += 1
        return exp


@pytest.fixture(scope="module")
def policy():
    tok = build_tokenizer()
    return build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=64), seed=0), tok


def _cfg(budget, tmp_path):
    return load_config(None, [f"trainer.preflight_budget={budget}", "rollout.max_new_tokens=8",
                              f"trainer.run_dir={tmp_path}"])


@pytest.mark.parametrize("warmup,jitter", [(0.0, 1.0), (20.0, 1.0), (5.0, 1.2)])
def test_the_budget_is_never_overrun(policy, tmp_path, warmup, jitter):
    model, tok = policy
    items = get_task("arith").items("eval", 64)
    clock = Clock()
    col = TimedCollector(make_collector(tok, max_new_tokens=8), clock, per_row=0.2, warmup=warmup, jitter=jitter)
    lines = []
    budget = 60.0
    spec = PreflightSpec(k=8, group_size=8, temperature=1.0, max_new_tokens=8, budget=budget, readability=False)
    res = measure_preflight(model, tok, items, col, spec, log=lines.append, clock=clock)
    n = res.stats.n_items
    assert clock.t <= budget  # the budget is a budget, the first chunk's warm-up included
    assert res.settings["stopped_at_budget"] and 1 <= n < 64
    # it stopped because one more item at the last rate (with the margin) would not have fit
    assert clock.t + 1.8 * jitter * MARGIN > budget - RESERVE_S
    assert [ln for ln in lines if ln.startswith("preflight: ")][-1].startswith(f"preflight: {n}/64 items")
    assert "of a 60 s budget" in lines[-1] and "ETA" in lines[-1]


def test_a_warmup_longer_than_the_budget_stops_after_the_first_item(policy):
    model, tok = policy
    items = get_task("arith").items("eval", 16)
    clock = Clock()
    col = TimedCollector(make_collector(tok, max_new_tokens=8), clock, per_row=0.1, warmup=100.0)
    spec = PreflightSpec(k=8, group_size=8, temperature=1.0, max_new_tokens=8, budget=30, readability=False)
    res = measure_preflight(model, tok, items, col, spec, log=lambda s: None, clock=clock)
    assert res.stats.n_items == 1 and res.verdict() == "can't tell"  # never "no headroom" from 1 item


def test_planner_sizes():
    p = BudgetPlanner(60)
    assert p.next_size(0.0, 64) == 1
    p.record(1, 10.0)  # first item: 10 s (warm-up)
    # 50 s left less the reserve at 10 s/item x 1.25: 3 fit, but a chunk grows at most 2x
    assert p.next_size(10.0, 63) == 2
    p.record(2, 2.0)  # 1 s/item now
    assert p.next_size(12.0, 61) == 4
    assert p.next_size(59.0, 61) == 0
    assert BudgetPlanner(0).next_size(1e9, 5) == 1  # no budget: never stops early
    assert BudgetPlanner(0.2).next_size(0.0, 5) == 0  # not even the first item fits the reserve


def test_train_check_writes_preflight(policy, tmp_path):
    model, tok = policy
    items = get_task("arith").items("eval", 16)
    lines = []
    full = run_preflight_check(model, tok, items, _cfg(0, tmp_path), tmp_path, log=lines.append,
                               collector=make_collector(tok, max_new_tokens=8))
    saved = json.loads((tmp_path / "preflight.json").read_text())
    assert saved["stats"]["n_items"] == 16 and saved["verdict"] == full.verdict()
    assert (tmp_path / "preflight.md").read_text().startswith("# Preflight")
    assert any(ln.startswith("preflight (16 held-out items x 8 samples") for ln in lines)
    assert "stopped at" not in "\n".join(lines)
    assert lines[-1].endswith(f"({tmp_path / 'preflight.md'})")  # the real path, not a literal RUN_DIR


def test_a_cut_check_equals_an_unbounded_check_of_its_prefix(policy):
    model, tok = policy
    items = get_task("arith").items("eval", 32)
    clock = Clock()
    col = TimedCollector(make_collector(tok, max_new_tokens=8), clock, per_row=1.0)  # 9 s per item
    spec = dict(k=8, group_size=8, temperature=1.0, max_new_tokens=8, seed=3, readability=False)
    cut = measure_preflight(model, tok, items, col, PreflightSpec(**spec, budget=35), clock=clock, log=lambda s: None)
    n = cut.stats.n_items
    # chunks of 1 and 2 items (27 s); one more item x 1.25 would end past 35 s
    assert cut.settings["stopped_at_budget"] and n == 3
    prefix = measure_preflight(model, tok, items[:n], make_collector(tok, max_new_tokens=8), PreflightSpec(**spec),
                               log=lambda s: None)
    assert cut.stats == prefix.stats  # the same items in the same chunks from the same sampling stream


@pytest.mark.parametrize("bad", ["-1", "inf", "true", "abc"])
def test_bad_budget_is_refused(bad, tmp_path):
    with pytest.raises(ConfigError, match="trainer.preflight_budget"):
        load_config(None, [f"trainer.preflight_budget={bad}"])


def test_the_old_headroom_keys_get_one_error_naming_the_new_ones(tmp_path):
    for old, new in (("trainer.headroom=false", "trainer.preflight=false"),
                     ("trainer.headroom_budget=5", "trainer.preflight_budget=5")):
        with pytest.raises(ConfigError, match=f"{old.split('=')[0]} is now {new.split('=')[0]} .*write {new}"):
            load_config(None, [old])
    f = tmp_path / "c.yaml"
    f.write_text("trainer: {headroom: false}\n")
    with pytest.raises(ConfigError, match="trainer.headroom is now trainer.preflight"):
        load_config(str(f))
    assert load_config(None, ["trainer.preflight=false"]).trainer.preflight is False


def test_answer_of_a_response():
    from grpolab.measure.preflight import answer_of

    assert answer_of("3 + 4 = 7", {"extracted": "7"}) == "7"           # the verifier's answer first
    assert answer_of("work\n\n  so 7  \n", {}) == "so 7"                # else the last non-empty line
    assert answer_of("", {"extracted": None}) is None
    assert answer_of("x" * 100, {}) == "x" * 64
