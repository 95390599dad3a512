"""Reward registry, RewardResult validation, score/safe_score contracts."""

import math

import pytest

import grpolab.rewards.base as base
from grpolab.rewards import (
    RewardResult,
    get_reward,
    list_rewards,
    register_reward,
    safe_score,
    score,
)


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    monkeypatch.setattr(base, "_REWARDS", dict(base._REWARDS))


def test_builtins_registered():
    assert {"math", "exact", "reasoning_gym"} <= set(list_rewards())


def test_unknown_name_lists_known():
    with pytest.raises(ValueError, match=r"unknown reward 'mth'.*'exact'.*'math'"):
        get_reward("mth")


def test_register_and_score_wraps_numbers():
    @register_reward("len3")
    def len3(completion, reference, *, bonus=0.0):
        return float(len(completion) == 3) + bonus

    assert get_reward("len3") is len3
    assert score("len3", "abc", "") == RewardResult(1.0, {})
    assert score("len3", "ab", "", bonus=0.5).score == 0.5


def test_duplicate_registration_needs_overwrite():
    register_reward("dup")(lambda c, r: 1.0)
    with pytest.raises(ValueError, match="already registered"):
        register_reward("dup")(lambda c, r: 0.0)
    register_reward("dup", overwrite=True)(lambda c, r: 0.25)
    assert score("dup", "", "").score == 0.25


def test_safe_score_turns_every_failure_into_zero():
    @register_reward("boom")
    def boom(completion, reference):
        raise RuntimeError("verifier crashed")

    @register_reward("nan")
    def nan(completion, reference):
        return math.nan

    @register_reward("wrongtype")
    def wrongtype(completion, reference):
        return "1.0"

    with pytest.raises(RuntimeError):
        score("boom", "x", "y")
    cases = {
        ("boom", "x"): "RuntimeError: verifier crashed",
        ("nan", "x"): "ValueError",
        ("wrongtype", "x"): "TypeError",
        ("nope", "x"): "ValueError: unknown reward 'nope'",
        ("math", None): "TypeError: completion must be a str",
    }
    for (name, completion), error in cases.items():
        result = safe_score(name, completion, "1")
        assert result.score == 0.0
        assert result.info["error"].startswith(error), result.info
    # unexpected option -> TypeError, still caught
    assert "TypeError" in safe_score("math", "#1", "1", colour="red").info["error"]


def test_reward_result_validation():
    assert RewardResult(True).score == 1.0 and RewardResult(1).info == {}
    with pytest.raises(ValueError):
        RewardResult(float("inf"))
    with pytest.raises(TypeError):
        RewardResult("1")
    with pytest.raises(TypeError):
        RewardResult(1.0, info=None)


def test_hanging_verifier_times_out_and_scores_zero(monkeypatch):
    import time

    from grpolab.rewards import base

    @base.register_reward("test_hangs_forever")
    def _hang(completion, reference, **_):
        while True:
            time.sleep(0.01)

    monkeypatch.setattr(base, "VERIFIER_TIME_LIMIT_S", 0.2)
    t0 = time.time()
    res = base.safe_score("test_hangs_forever", "x", "y")
    assert time.time() - t0 < 2.0
    assert res.score == 0.0 and "VerifierTimeout" in res.info["error"]
    # the alarm is disarmed afterwards: a normal verifier is unaffected
    assert base.safe_score("exact", "#5", "5").score == 1.0
    time.sleep(0.3)
