"""grpolab.bench.trl_equal_work (the harness of benchmarks/speed/vs_trl.py and real_model_speed.py's
TRL part): the shared prompt schedule, the per-token rates and the equal-work rule."""

import pytest

from grpolab.bench import trl_equal_work as vs_trl


def test_prompt_schedule_is_seeded_and_distinct_within_a_step():
    a = vs_trl.prompt_schedule(256, 5, 16, seed=0)
    assert a == vs_trl.prompt_schedule(256, 5, 16, seed=0)
    assert a != vs_trl.prompt_schedule(256, 5, 16, seed=1)
    assert len(a) == 5 and all(len(set(step)) == 16 and all(0 <= i < 256 for i in step) for step in a)


def _run(side, step_s, rollout_s, length, trained=None, others=0.0):
    n = len(step_s)
    gen = [128 * length] * n
    return {"side": side, "seed": 0, "step_s": step_s, "rollout_s": rollout_s,
            "update_s": [a - b for a, b in zip(step_s, rollout_s)], "others_cores": [others] * n,
            "mean_length": [length] * n, "gen_tokens": gen, "trained_tokens": trained or gen,
            "mean_reward": [0.1] * n}


def test_rates_ratios_and_verdict_at_equal_work():
    trl = _run("trl", [9.0, 4.0, 4.0, 5.0], [5.0, 2.0, 2.0, 3.0], 30.0)
    ours = _run("grpolab", [7.0, 2.0, 2.0, 2.5], [4.0, 0.5, 0.5, 1.0], 31.0)
    res = {"trl": vs_trl.pooled([trl]), "grpolab": vs_trl.pooled([ours])}
    t, g = res["trl"], res["grpolab"]
    assert t["steps"] == 3 and t["median_s_per_step"] == 4.0  # the warm-up step is left out
    assert t["rollout_tokens_per_s"] == pytest.approx(3 * 128 * 30 / 7.0)  # totals, not a mean of rates
    assert g["update_tokens_per_s"] == pytest.approx(3 * 128 * 31 / 4.5)
    r = vs_trl.ratios(t, g)
    assert r["s_per_step_median"] == pytest.approx(2.0)
    assert r["s_per_generated_token"] == pytest.approx((13.0 / (3 * 128 * 30)) / (6.5 / (3 * 128 * 31)))
    v = vs_trl.equal_work_verdict(res, {"grpolab": r}, [trl, ours])
    assert v["met"] is True and v["ratio"] == pytest.approx(2.0) and "warning" not in v


def test_no_verdict_when_lengths_differ_by_more_than_ten_percent():
    trl = _run("trl", [9.0, 4.0, 4.0], [5.0, 2.0, 2.0], 20.0)
    ours = _run("grpolab", [7.0, 2.0, 2.0], [4.0, 0.5, 0.5], 23.0, others=1.5)  # 14% longer
    res = {"trl": vs_trl.pooled([trl]), "grpolab": vs_trl.pooled([ours])}
    v = vs_trl.equal_work_verdict(res, {"grpolab": vs_trl.ratios(res["trl"], res["grpolab"])}, [trl, ours])
    assert "met" not in v and v["status"].startswith("no verdict") and "did not do equal work" in v["status"]
    assert "contended" in v["warning"]
