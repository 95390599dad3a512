"""benchmarks/experiments/preflight_calibration.py: the agreement it reports, the committed record's
schema (issue 43), and the reasoning-gym settings' criterion (c): >= 200 distinct held-out questions."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "experiments" / "preflight_calibration.py"


def _load():
    spec = importlib.util.spec_from_file_location("preflight_calibration", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _setting(name, verdict, gains):
    return {"name": name, "preflight": {"grpo": verdict},
            "gain": {"seeds": {str(i): {"gain": g} for i, g in enumerate(gains)}}}


def test_agreement_counts_the_sign_of_the_mean_gain_and_names_the_misses():
    cal = _load()
    record = {"settings": [
        _setting("a", "indicated", [0.30, 0.20, 0.25]),        # agrees
        _setting("b", "indicated", [0.01, -0.02, 0.02]),       # mean +0.3 points: no gain -> miss
        _setting("c", "not indicated", [0.0, 0.01, -0.01]),    # agrees (no gain)
        _setting("d", "not indicated", [0.12, 0.15, 0.11]),    # miss, and every seed gained >= 10 points
        _setting("e", "can't tell", [0.5]),                    # counted apart
        {"name": "f", "preflight": {"grpo": "indicated"}, "gain": {"seeds": {}}},  # not run: not counted
    ]}
    cal._summarise(record, 0.02)
    a = record["agreement"]
    assert (a["settings_with_runs"], a["decided"], a["cant_tell"], a["agree_decided"]) == (5, 4, 1, 2)
    assert a["share_of_decided"] == 0.5 and a["share_of_all"] == 0.4
    assert a["never_not_indicated_where_all_seeds_gain_10pts"] is False
    missed = [m["setting"] for m in record["misses"]]
    assert missed == ["b", "d", "d"]  # d: the sign miss and the every-seed-gained rule
    assert record["settings"][0]["gain"]["final"] == pytest.approx(0.25)


def test_agreement_with_pilot_uses_the_pilots_verdict_where_one_ran():
    cal = _load()
    pil = lambda v: {"verdict": v, "start_verdict": "indicated", "steps": 3, "n_items": 64}  # noqa: E731
    record = {"settings": [
        {**_setting("a", "indicated", [0.01, 0.0]), "pilot": pil("not indicated")},   # a start miss the pilot fixes
        {**_setting("b", "indicated", [0.3]), "pilot": pil("indicated")},             # agrees both ways
        {**_setting("c", "indicated", [-0.1]), "pilot": pil("can't tell")},           # miss -> counted apart
        _setting("d", "indicated", [-0.05]),                                          # no pilot: the start's miss
        {**_setting("e", "indicated", [0.2, 0.0]), "pilot": pil("not indicated")},    # the pilot's own miss
    ]}
    cal.summarise(record, 0.02)
    a, w = record["agreement"], record["agreement_with_pilot"]
    assert (a["decided"], a["agree_decided"]) == (5, 2)            # the start's verdicts, unchanged
    assert (w["decided"], w["cant_tell"], w["agree_decided"]) == (4, 1, 2)
    assert sorted(m["setting"] for m in w["misses"]) == ["d", "e"] and w["piloted_settings"] == 4
    assert (w["piloted_only"]["decided"], w["piloted_only"]["agree_decided"]) == (3, 2)
    assert (w["piloted_only_start"]["decided"], w["piloted_only_start"]["agree_decided"]) == (4, 2)
    assert [m["setting"] for m in record["misses"]] == ["a", "c", "d"]  # the start's misses kept


def test_follow_up_applies_only_after_a_cant_tell_pilot_and_its_verdict_stands():
    cal = _load()
    pil = lambda v, steps=3: {"verdict": v, "start_verdict": "indicated", "steps": steps, "n_items": 64}  # noqa: E731
    a = {**_setting("a", "indicated", [0.05]), "pilot": pil("can't tell"), "pilot_follow_up": pil("indicated", 6)}
    b = {**_setting("b", "indicated", [0.0]), "pilot": pil("can't tell"), "pilot_follow_up": pil("can't tell", 6)}
    c = {**_setting("c", "indicated", [-0.1]), "pilot": pil("indicated")}   # decided: no follow-up, its miss stays
    # MiniWoB++: the latest pilot (200 per task) decides whether a follow-up applies, not the first
    d = {**_setting("d", "indicated", [0.3]), "pilot": pil("can't tell"), "pilot_200_per_task": pil("indicated")}
    e = {**_setting("e", "indicated", [0.3]), "pilot": pil("indicated"), "pilot_200_per_task": pil("can't tell")}
    assert [cal.needs_follow_up(x) for x in (a, b, c, d, e)] == [True, True, False, False, True]
    assert not cal.needs_follow_up({**a, "pilot": {**pil("can't tell"), "skipped": True}})
    assert cal.follow_up_steps(10) == 5 and cal.follow_up_steps(1) == 1 and cal.follow_up_steps(7) == 4
    e["pilot_follow_up"] = pil("not indicated", 60)   # a miss of the follow-up itself
    record = {"settings": [a, b, c, d, e]}
    cal.summarise(record, 0.02)
    f = record["agreement_with_follow_up"]
    assert (f["decided"], f["cant_tell"], f["agree_decided"]) == (4, 1, 2)   # a, d agree; c, e miss; b can't tell
    # e: the sign miss and the every-seed-gained rule
    assert sorted(m["setting"] for m in f["misses"]) == ["c", "e", "e"] and f["followed_up"] == ["a", "b", "e"]
    assert f["never_not_indicated_where_all_seeds_gain_10pts"] is False
    assert record["agreement_with_pilot"]["cant_tell"] == 3   # a, b, d: the first pilots' count is untouched


def test_after_fixes_counts_the_re_measured_rows_and_leaves_the_others_and_the_pre_fix_counts():
    cal = _load()
    pil = lambda v, steps=30: {"verdict": v, "start_verdict": "indicated", "steps": steps, "n_items": 200}  # noqa: E731
    seeds = lambda *g: {"seeds": {str(i): {"gain": x} for i, x in enumerate(g)}}  # noqa: E731
    # a re-measured MiniWoB++ row: the pre-fix pilot missed (-4 points); re-measured, the follow-up decides
    # "indicated" and the fixed runs gain, so it agrees after the fixes
    m = {**_setting("miniwob/recorded/t", "indicated", [-0.04]), "pilot": pil("indicated"),
         "after_fixes": {"start_verdict": "can't tell", "pilot": pil("can't tell"),
                         "pilot_follow_up": pil("indicated", 60), "gain": seeds(0.05, 0.03, 0.04)}}
    # a re-measured row whose start says "not indicated" (its pilot skipped) and whose runs gain nothing
    n = {**_setting("miniwob/recorded/u", "indicated", [0.10]), "pilot": pil("indicated"),
         "after_fixes": {"start_verdict": "not indicated", "pilot": {**pil("not indicated"), "skipped": True},
                         "gain": seeds(0.0, 0.01, -0.01)}}
    # not re-measured: counted with its last follow-up stage, as agreement_with_follow_up_items
    o = {**_setting("o", "indicated", [0.2]), "pilot": pil("can't tell"), "pilot_follow_up": pil("can't tell", 60),
         "pilot_follow_up_items": pil("not indicated", 60)}
    record = {"settings": [m, n, o]}
    cal.summarise(record, 0.02)
    f = record["agreement_after_fixes"]
    assert (f["decided"], f["cant_tell"], f["agree_decided"]) == (3, 0, 2)
    assert [x["setting"] for x in f["misses"]] == ["o", "o"]   # the sign miss and the every-seed rule
    assert (f["start"]["decided"], f["start"]["cant_tell"], f["start"]["agree_decided"]) == (2, 1, 2)  # n, o agree
    assert f["re_measured"] == ["miniwob/recorded/t", "miniwob/recorded/u"]
    # what --pilot alone gives: the first stage only (m's and o's first pilots can't tell; n's "not indicated" agrees)
    p1 = f["first_pilot"]
    assert (p1["decided"], p1["cant_tell"], p1["agree_decided"], p1["share_of_all"]) == (1, 2, 1, pytest.approx(1 / 3))
    # the pre-fix counts (m misses, n agrees, o can't tell) and the settings' own gains are untouched
    assert record["agreement_with_pilot"]["agree_decided"] == 1 and m["gain"]["final"] == pytest.approx(-0.04)
    assert m["after_fixes"]["gain"]["final"] == pytest.approx(0.04)


def test_greedy_aware_rule_lets_a_decided_greedy_change_decide_only_a_cant_tell_stage():
    cal = _load()
    ch = lambda lo, hi: {"value": (lo + hi) / 2, "low": lo, "high": hi}  # noqa: E731
    st = lambda v, g, **kw: {"verdict": v, "greedy_change": ch(*g), **kw}  # noqa: E731
    assert cal.greedy_aware(st("can't tell", (0.01, 0.09))) == "indicated"
    assert cal.greedy_aware(st("can't tell", (-0.12, -0.03))) == "not indicated"
    assert cal.greedy_aware(st("can't tell", (-0.05, 0.019))) == "not indicated"   # below +2 points
    assert cal.greedy_aware(st("can't tell", (-0.01, 0.05))) == "can't tell"
    assert cal.greedy_aware(st("indicated", (-0.2, -0.1))) == "indicated"          # a decided stage stands
    assert cal.greedy_aware(st("not indicated", (0.1, 0.2), skipped=True)) == "not indicated"
    pil = lambda v, g: {"verdict": v, "start_verdict": "indicated", "steps": 30, "n_items": 200,  # noqa: E731
                        "greedy_change": ch(*g)}
    seeds = lambda *g: {"seeds": {str(i): {"gain": x} for i, x in enumerate(g)}}  # noqa: E731
    t = {**_setting("miniwob/recorded/t", "indicated", [0.0]),
         "after_fixes": {"start_verdict": "indicated", "pilot": pil("can't tell", (0.02, 0.1)), "gain": seeds(0.08)}}
    u = {**_setting("miniwob/recorded/u", "indicated", [0.0]),
         "after_fixes": {"start_verdict": "indicated", "pilot": pil("can't tell", (-0.1, -0.03)), "gain": seeds(0.05)}}
    o = {**_setting("o", "indicated", [0.0]), "pilot": pil("can't tell", (0.05, 0.1))}   # not re-measured
    record = {"settings": [t, u, o]}
    cal.summarise(record, 0.02)
    g = record["agreement_after_fixes_greedy_aware"]
    assert (g["decided"], g["agree_decided"]) == (3, 1)          # t agrees; u and o (no gain) miss
    r = g["re_measured_only"]
    assert (r["settings_with_runs"], r["decided"], r["agree_decided"]) == (2, 2, 1)
    assert record["agreement_after_fixes"]["cant_tell"] == 3     # the headline rule is untouched


def test_threshold_bound_is_the_best_in_sample_one_threshold_rule():
    cal = _load()

    def st(name, greedy, pass_k, gains):
        return {"name": name, "preflight": {"grpo": "indicated", "greedy": greedy, "pass_at_k": pass_k},
                "gain": {"seeds": {str(i): {"gain": g} for i, g in enumerate(gains)}}}

    # gains up where greedy is low; pass@k says nothing (the same 0.5 everywhere but one)
    record = {"settings": [st("a", 0.1, 0.5, [0.3]), st("b", 0.2, 0.5, [0.2]), st("c", 0.6, 0.5, [0.0]),
                           st("d", 0.7, 0.9, [-0.1]), st("e", 0.3, 0.5, [0.01]),  # e: +1 point = no gain
                           {"name": "f", "preflight": {"grpo": "indicated", "greedy": 0.0}, "gain": {"seeds": {}}}]}
    by = {b["statistic"]: b for b in cal.threshold_bound(record, 0.02)}
    g = by["greedy"]
    assert (g["settings"], g["best_agree"]) == (5, 5) and g["rule"] == "go where greedy < 0.300"
    assert by["pass@k"]["best_agree"] == 3   # 'go where pass@k < 0.9' gets a, b right, c and e wrong, d right
    assert by["pass@k - greedy"]["settings"] == 5 and "reachable" not in by   # no setting has it


def test_committed_record_has_the_issue_schema():
    rec = json.loads((ROOT / "docs" / "results" / "preflight_calibration.json").read_text())
    assert len(rec["settings"]) >= 12
    for s in rec["settings"]:
        assert s["model"] and s["task"] and s["preflight"]["grpo"] in ("indicated", "not indicated", "can't tell")
        assert s["gain"]["seeds"] and isinstance(s["gain"]["final"], float)
    a = rec["agreement"]
    assert 0 <= a["share_of_decided"] <= 1 and a["decided"] + a["cant_tell"] == a["settings_with_runs"]
    assert isinstance(rec["misses"], list) and len(rec["commit"]) == 40
    assert "benchmarks/experiments/preflight_calibration.py" in rec["command"]
    piloted = [s for s in rec["settings"] if s.get("pilot")]
    for s in piloted:  # a pilot's verdict follows the frozen rule from its own numbers
        p = s["pilot"]
        assert p["steps"] < p["run_steps"] and p["seed"] not in (0, 1, 2, 3, 4)
        if not p["skipped"]:
            c = p["sampled_change"]
            want = ("not indicated" if p["start_verdict"] == "not indicated" else "indicated" if c["low"] > 0
                    else "not indicated" if c["high"] < 0.02 else "can't tell")
            assert p["verdict"] == want, s["name"]
    for s in rec["settings"]:  # a follow-up ran only after a can't-tell pilot, longer, with the same seed
        if s.get("pilot_follow_up"):
            latest = s.get("pilot_200_per_task") or s["pilot"]
            assert latest["verdict"] == "can't tell" and s["pilot_follow_up"]["steps"] > latest["steps"], s["name"]
            assert s["pilot_follow_up"]["seed"] == latest["seed"] and s["pilot_follow_up"]["n_items"] == latest["n_items"]
    for s in rec["settings"]:  # the re-measured MiniWoB++ rows: each stage ran only after "can't tell" before it
        a = s.get("after_fixes")
        if a:
            assert a["gain"]["seeds"] and a["pilot"]["n_items"] == 200 and a["pilot"]["seed"] == 7, s["name"]
            if a.get("pilot_follow_up"):
                assert a["pilot"]["verdict"] == "can't tell" and a["pilot_follow_up"]["steps"] == 60
            if a.get("pilot_follow_up_items"):
                assert a["pilot_follow_up"]["verdict"] == "can't tell" and a["pilot_follow_up_items"]["n_items"] == 500
    if any(s.get("after_fixes") for s in rec["settings"]):
        f = rec["agreement_after_fixes"]
        assert f["decided"] + f["cant_tell"] == f["settings_with_runs"] == len(rec["settings"])
        assert len(f["re_measured"]) == 8
    if piloted:
        w = rec["agreement_with_pilot"]
        assert w["piloted_settings"] == len(piloted) and w["decided"] + w["cant_tell"] == w["settings_with_runs"]


def test_reasoning_gym_settings_hold_200_distinct_held_out_questions():
    pytest.importorskip("reasoning_gym")
    from grpolab.config import load_config
    from grpolab.tasks.base import get_task

    cal = _load()
    rg = [s for s in cal.SETTINGS if s["name"].startswith("smollm2/rg/")]
    assert len(rg) == 3
    for s in rg:
        cfg_file, sets = cal._config(s, ROOT / "runs" / "calib")
        cfg = load_config(ROOT / cfg_file, sets)
        assert cfg.rollout.max_new_tokens == 32 and cfg.task.name == "reasoning_gym"
        task = get_task(cfg.task.name, **cfg.task.options)
        held_out = {it.prompt for it in task.items("eval")}
        assert len(held_out) >= 200, s["name"]
        assert not held_out & {it.prompt for it in task.items("train")}
        assert all(len(it.reference) <= 4 and it.reference.isdigit() for it in task.items("eval"))  # criterion (a)
