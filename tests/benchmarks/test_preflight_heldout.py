"""benchmarks/experiments/preflight_heldout.py (issue 59): the drawn settings are new and reproducible,
the label rule, the degenerate-answer check, and the report on SYNTHETIC records (nothing here trains)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "experiments" / "preflight_heldout.py"


@pytest.fixture(scope="module")
def ho():
    spec = importlib.util.spec_from_file_location("preflight_heldout", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


def test_in_sample_list_is_the_committed_calibrations_26_settings(ho):
    names = [s["name"] for s in json.loads((ROOT / "docs/results/preflight_calibration.json").read_text())["settings"]]
    assert len(names) == 26 and set(ho.IN_SAMPLE) == set(names)


def test_draw_is_reproducible_new_and_large_enough(ho):
    a, b = ho.draw_settings(), ho.draw_settings()
    assert [s.name for s in a] == [s.name for s in b]
    assert len(a) >= 24 and len({s.name for s in a}) == len(a)
    assert ho.in_sample_clashes(a) == []
    in_sample_names = set(ho.IN_SAMPLE)
    assert not {s.name.removesuffix("/lr-high") for s in a} & in_sample_names
    assert not {s.key() for s in a} & set(ho.IN_SAMPLE.values())
    strata = {s.stratum for s in a}
    assert {"smollm2-arith", "tiny", "miniwob"} <= strata and any(x.startswith("smollm2-short_") for x in strata)
    high = [s for s in a if s.high_lr]
    assert 0 < len(high) < len(a) and all(s.name.endswith("/lr-high") for s in high)


def test_clash_check_catches_an_in_sample_setting(ho):
    again = ho._smol("sums0-20/cap32", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5}, cap=32)
    renamed = ho._smol("anything", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5}, cap=12)
    assert ho.in_sample_clashes([again, renamed]) == ["smollm2/sums0-20/cap32", "smollm2/anything"]


def test_seeds_are_disjoint_and_enough_for_a_label(ho):
    assert len(ho.TRAIN_SEEDS) >= 5 and len(ho.PILOT_SEEDS) == 2
    assert not set(ho.TRAIN_SEEDS) & set(ho.PILOT_SEEDS)
    assert not {0, 1, 2, 7} & set(ho.TRAIN_SEEDS + ho.PILOT_SEEDS)  # the in-sample calibration's seeds


def test_label_rule(ho):
    assert len(ho.TRAIN_SEEDS) == 8
    # eight seeds all up: sign-flip p = 2/256 and t p tiny -> gain
    assert ho.label_of([0.30, 0.25, 0.28, 0.31, 0.27, 0.29, 0.26, 0.30])[0] == ho.GAIN
    # seven seeds up 20 points, one that never moved: still a gain with 8 seeds (sign-flip p 4/256;
    # six seeds would give 4/64 = 0.0625, the held-out case issue 59 describes)
    label, test = ho.label_of([0.20, 0.22, 0.18, 0.25, 0.0, 0.21, 0.19, 0.23])
    assert label == ho.GAIN and test["sign_flip_p"] == pytest.approx(4 / 256)
    # all flat: the one-sided upper bound is far below 3 points -> no gain
    assert ho.label_of([0.0, 0.004, -0.004, 0.0, 0.008, -0.008, 0.0, 0.0])[0] == ho.NO_GAIN
    # noisy around +1 point: not significant; upper bound by hand: mean 0.01, sd 0.0107 (values below),
    # t(0.95, 7) = 1.8946 -> 0.01 + 1.8946 * sd / sqrt(8) < 0.03 -> no gain (less than 3 points)
    vals = [0.02, 0.0, 0.01, 0.03, -0.01, 0.01, 0.02, 0.0]
    label, test = ho.label_of(vals)
    m = sum(vals) / 8
    sd = (sum((v - m) ** 2 for v in vals) / 7) ** 0.5
    assert test["upper_one_sided"] == pytest.approx(m + 1.8946 * sd / 8 ** 0.5, abs=1e-4) and label == ho.NO_GAIN
    # one seed in three gains a lot (products-like): neither -> unclear
    assert ho.label_of([0.45, 0.0, 0.0, 0.40, 0.0, 0.0, 0.30, 0.0])[0] == ho.UNCLEAR
    # five seeds all up cannot reach p < 0.05 with the exact sign-flip test (2/32), and the upper bound is
    # far above 3 points: unclear, neither gain nor no gain
    label, test = ho.label_of([0.30, 0.25, 0.28, 0.31, 0.27])
    assert label == ho.UNCLEAR and test["sign_flip_p"] == pytest.approx(2 / 32)
    # all down: significant loss -> no gain
    assert ho.label_of([-0.10, -0.12, -0.08, -0.11, -0.09, -0.10, -0.1, -0.13])[0] == ho.NO_GAIN
    with pytest.raises(ValueError, match=">= 5 seeds"):
        ho.label_of([0.3, 0.3, 0.3])


def _evalrec(solved, answers):
    return {"solved": solved, "answers": answers, "prompts": [f"q{i}" for i in range(len(solved))]}


def test_degenerate_answer_check(ho):
    # 10 items; the start answers each differently and solves 1; the final answers "7" to 6 items, right on 3
    start = _evalrec([True] + [False] * 9, [str(i) for i in range(10)])
    final = _evalrec([True, True, True, True] + [False] * 6, ["0", "7", "7", "7", "7", "7", "7", "x", "y", "z"])
    g = ho.seed_gain(start, final)
    assert g["gain"] == pytest.approx(0.3)            # 4/10 - 1/10
    assert g["mode_before"]["share"] == pytest.approx(0.1) and g["mode_after"] == {"answer": "7", "share": 0.6}
    assert g["degenerate"] and g["gain_without_mode"] == pytest.approx(0.0)  # only item 0 is left, solved before
    with pytest.raises(ValueError, match="different items"):
        ho.seed_gain(start, {**final, "prompts": ["other"] * 10})


def test_answer_of_reads_the_last_line(ho):
    assert ho.answer_of("3 + 4 = 7\nAnswer: 7\n\n") == "Answer: 7" and ho.answer_of("  ") == ""


def test_read_preflight_adapter(ho):
    d = {"verdict": "can't tell", "settings": {"stage": "pilot measured", "total_seconds": 12.5},
         "stats": {"greedy": {"value": 0.1}, "pass_at_k": {"value": 0.4}},
         "methods": [{"id": "grpo", "verdict": "can't tell", "cause": "pilot_no_update"}, {"id": "dapo"}],
         "pilot": {"training": {"steps": 2, "updates": 0}}}
    r = ho.read_preflight(d)
    assert r == {"verdict": "can't tell", "cause": "pilot_no_update", "greedy": 0.1, "pass_at_k": 0.4,
                 "stage": "pilot measured", "pilot_updates": 0, "seconds": 12.5}


def test_commands_use_the_cli_and_the_same_items(ho, tmp_path):
    s = next(x for x in ho.draw_settings() if x.model == "smollm2" and x.task == "short_arith")
    pilot = ho.command(ho.Stage(s, "pilot", 2001), tmp_path, budget_s=200.4)
    assert pilot[3:5] == ["preflight", ho.SMOL] and "--pilot" in pilot
    assert pilot[pilot.index("--pilot") + 1] == str(s.pilot_steps()) and pilot[pilot.index("--budget") + 1] == "200"
    assert "trainer.seed=2001" in pilot and pilot[pilot.index("--seed") + 1] == str(ho.MEASURE_SEED)
    start = ho.command(ho.Stage(s, "eval_start", 0), tmp_path)
    final = ho.command(ho.Stage(s, "eval_final", 1000), tmp_path)
    assert start[start.index("--n") + 1] == final[final.index("--n") + 1] == "256"
    assert final[4].endswith("train-1000/final") and start[4] == ho.SMOL
    # the first seed keeps its first-quarter checkpoint; the prefix evaluation reads it on the preflight's items
    p = s.pilot_steps()
    first = ho.command(ho.Stage(s, "train", ho.TRAIN_SEEDS[0]), tmp_path)
    other = ho.command(ho.Stage(s, "train", ho.TRAIN_SEEDS[1]), tmp_path)
    assert f"trainer.save_every={p}" in first and f"trainer.save_every={s.recipe.steps}" in other
    assert f"trainer.keep_checkpoints={s.recipe.steps // p + 1}" in first
    prefix = ho.command(ho.Stage(s, "prefix_eval", ho.TRAIN_SEEDS[0]), tmp_path)
    assert prefix[4].endswith(f"train-1000/checkpoints/step_{p:06d}/model") and prefix[prefix.index("--n") + 1] == "64"
    assert ho.command(ho.Stage(s, "start_verdict", ho.MEASURE_SEED), tmp_path)[-3] == "0"  # --budget 0: none


def _write(root, setting, stage, seed, data, cpu):
    p = root / "records" / setting.replace("/", "__") / f"{stage}-{seed}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps({"setting": setting, "stage": stage, "seed": seed, "rc": 0, "cpu_s": cpu,
                             "wall_s": cpu, "data": data}))


def _synthetic(ho, root, name, *, gains_solved, start_v, pilot_v, retest_v, greedy, passk, updates=2,
               prefix_solved=4, full_v=None):
    """One setting: 20 items, the start solves the first 4; seed i's final solves gains_solved[i] items; the
    first seed's first-quarter model solves the first ``prefix_solved`` of the preflight's items."""
    n = 20
    _write(root, name, "eval_start", 0, _evalrec([i < 4 for i in range(n)], [str(i) for i in range(n)]), 5)
    for seed, k in zip(ho.TRAIN_SEEDS, gains_solved):
        _write(root, name, "train", seed, {"final": "x", "reward_mean": [0.1] * 4, "with_signal": [1] * 4}, 100)
        _write(root, name, "eval_final", seed, _evalrec([i < k for i in range(n)], [str(i) for i in range(n)]), 5)
    _write(root, name, "prefix_eval", ho.TRAIN_SEEDS[0],
           _evalrec([i < prefix_solved for i in range(n)], [str(i) for i in range(n)]), 4)
    pf = lambda v: {"verdict": v, "cause": None, "greedy": greedy, "pass_at_k": passk,  # noqa: E731
                    "stage": "pilot measured", "pilot_updates": updates}
    _write(root, name, "start_verdict", ho.MEASURE_SEED, pf(start_v), 10)
    _write(root, name, "pilot", ho.PILOT_SEEDS[0], pf(pilot_v), 20)
    _write(root, name, "pilot", ho.PILOT_SEEDS[1], pf(retest_v), 30)
    _write(root, name, "pilot_full", ho.PILOT_SEEDS[0], pf(full_v or pilot_v), 150)


def test_report_on_synthetic_records(ho, tmp_path):
    settings = ho.draw_settings()[:4]
    names = [s.name for s in settings]
    up = [10, 9, 10, 11, 10, 9, 10, 11]  # every seed +5..+7 of 20 items: gain
    flat = [4] * 8                      # no gain
    _synthetic(ho, tmp_path, names[0], gains_solved=up, start_v="indicated", pilot_v="indicated",
               retest_v="indicated", greedy=0.2, passk=0.5, prefix_solved=16)  # all rules hit
    _synthetic(ho, tmp_path, names[1], gains_solved=flat, start_v="indicated", pilot_v="not indicated",
               retest_v="can't tell", greedy=0.2, passk=0.22)      # pilot, pass@k hit; start, always go miss
    _synthetic(ho, tmp_path, names[2], gains_solved=flat, start_v="can't tell", pilot_v="not indicated",
               retest_v="not indicated", greedy=0.2, passk=0.3, updates=0)  # pilot hits; others miss
    # names[3]: no records -> unfinished, a miss for every rule
    rec = ho.report(tmp_path, settings, "abc")
    s = rec["summary"]
    assert [r["label"] for r in rec["rows"]] == ["gain", "no gain", "no gain"]
    assert {r: s["agreement"][r]["k"] for r in ho.RULES} == {"pilot": 3, "start": 1, "always_go": 1, "passk_only": 2}
    assert all(s["agreement"][r]["n"] == 4 for r in ho.RULES)
    assert s["headline"]["value"] == pytest.approx(0.75)
    # Wilson 95% for 3/4, by hand: den 1 + 3.8416/4 = 1.9604; centre (0.75 + 3.8416/8) / 1.9604 = 0.62753;
    # half 1.96 * sqrt(0.75 * 0.25 / 4 + 3.8416 / 64) / 1.9604 = 1.96 * 0.32696 / 1.9604 = 0.32689
    assert s["headline"]["low"] == pytest.approx(0.30064, abs=1e-4)
    assert s["headline"]["high"] == pytest.approx(0.95442, abs=1e-4)
    pva = s["pairs"]["pilot vs always_go"]
    assert (pva["gained"], pva["lost"]) == (2, 0) and pva["p_value"] == pytest.approx(0.5)  # exact McNemar 2 vs 0
    assert s["test_retest"]["k"] == 2 and s["test_retest"]["n"] == 3
    assert s["pilots_without_update"] == 1 and s["pilot_stages"] == {"pilot measured": 3}
    assert s["median_cost_share"] == {"pilot": pytest.approx(0.2), "start": pytest.approx(0.1),
                                      "always_go": 0.0, "passk_only": pytest.approx(0.1), "run_prefix": 0.0,
                                      "prefix_eval": pytest.approx(0.08), "pilot_full": pytest.approx(1.5)}
    # the first quarter: setting 0 went 4 -> 16 of 20 (go, a hit); 1 and 2 stayed at 4 (no go, hits)
    assert [r["verdicts"]["prefix_eval"] for r in rec["rows"]] == [ho.GO, ho.NO_GO, ho.NO_GO]
    assert s["agreement"]["prefix_eval"]["k"] == 3 and s["agreement"]["pilot_full"]["k"] == 3
    # 4 steps of rewards: a first quarter of 1 step shows no slope -> can't tell, a miss everywhere
    assert s["agreement"]["run_prefix"]["k"] == 0 and {r["verdicts"]["run_prefix"] for r in rec["rows"]} == {ho.CANT_TELL}
    assert s["targets"]["pilot median cost <= 25% of a run"] and not s["targets"]["pilot >= 80% of all"]
    page = ho.markdown(rec)
    assert "3/4 (75%" in page and names[0] in page and "not met" in page


def test_prefix_eval_verdict_needs_an_update_and_the_same_items(ho, tmp_path):
    name = ho.draw_settings()[0].name
    _synthetic(ho, tmp_path, name, gains_solved=[4] * 8, start_v="indicated", pilot_v="indicated",
               retest_v="indicated", greedy=0.2, passk=0.5, prefix_solved=16)
    recs = ho.load_records(tmp_path)[name]
    assert ho.prefix_eval_verdict(recs) == ho.GO
    no_signal = {**recs[("train", 1000)], "data": {**recs[("train", 1000)]["data"], "with_signal": [0] * 4}}
    assert ho.prefix_eval_verdict({**recs, ("train", 1000): no_signal}) == ho.CANT_TELL
    moved = {**recs[("prefix_eval", 1000)], "data": {**recs[("prefix_eval", 1000)]["data"], "prompts": ["x"] * 20}}
    with pytest.raises(ValueError, match="other items"):
        ho.prefix_eval_verdict({**recs, ("prefix_eval", 1000): moved})


def test_an_evaluated_run_releases_its_models(ho, tmp_path):
    s = ho.draw_settings()[0]
    for seed in ho.TRAIN_SEEDS[:2]:
        run = tmp_path / "runs" / s.slug() / f"train-{seed}"
        (run / "final").mkdir(parents=True)
        (run / "checkpoints").mkdir()
    ho.release_run(ho.Stage(s, "eval_final", ho.TRAIN_SEEDS[1]), tmp_path)
    ho.release_run(ho.Stage(s, "eval_final", ho.TRAIN_SEEDS[0]), tmp_path)
    first = tmp_path / "runs" / s.slug() / "train-1000"
    assert not (tmp_path / "runs" / s.slug() / "train-1001").joinpath("checkpoints").exists()
    # the first seed's checkpoints wait for its first-quarter evaluation's record
    assert not (first / "final").exists() and (first / "checkpoints").exists()


def test_runner_refuses_before_the_freeze(ho, monkeypatch):
    monkeypatch.setattr(ho, "_git", lambda *a: "0123456789abcdef draft protocol" if a[0] == "log" else "")
    with pytest.raises(RuntimeError, match="DRAFT"):
        ho.frozen_commit()
    monkeypatch.setattr(ho, "_git", lambda *a: "0123456789abcdef freeze" if a[0] == "log" else "src/x.py")
    with pytest.raises(RuntimeError, match="changed since the freeze"):
        ho.frozen_commit()
    monkeypatch.setattr(ho, "_git", lambda *a: "0123456789abcdef freeze" if a[0] == "log" else "")
    assert ho.frozen_commit() == "0123456789abcdef"


def test_execute_skips_a_stage_whose_record_exists(ho, tmp_path):
    s = ho.draw_settings()[0]
    st = ho.Stage(s, "train", ho.TRAIN_SEEDS[0])
    p = st.record_path(tmp_path)
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"kept": True}))
    assert ho.execute(st, tmp_path, "abc") == {"kept": True}
    # a verdict stage waits for the first training seed's wall time (its budget)
    assert ho.execute(ho.Stage(ho.draw_settings()[1], "pilot", ho.PILOT_SEEDS[0]), tmp_path, "abc") is None


def test_checkable_settings_validate_and_hold_enough_held_out_items(ho, tmp_path):
    """The settings whose tasks this checkout has without extras (short_arith on SmolLM2, the tiny model's
    tasks): the config validates and the label rests on >= 100 held-out items (numbers from --check)."""
    checkable = [s for s in ho.draw_settings() if s.task in ("short_arith", "arith", "reverse", "tool_arith")]
    assert len(checkable) >= 10
    for s in checkable:
        r = ho.check_setup(s, tmp_path)
        assert r["ok"], r
        assert r["label_items"] >= 100, r


def test_option_values_are_written_as_yaml_that_round_trips(ho, tmp_path):
    # '-' alone is YAML for a list item: an unquoted ops=- became [None] (found by --check)
    s = next(x for x in ho.draw_settings() if '"ops": "-"' in x.options)
    line = next(x for x in s.overrides(tmp_path) if x.startswith("task.options.ops="))
    assert line == 'task.options.ops="-"'
    from grpolab.config import load_config
    assert load_config(s.config, s.overrides(tmp_path)).task.options["ops"] == "-"


def test_run_prefix_rule(ho):
    # 8 steps: first half mean 0.10, second half 0.15 -> rise 0.05 >= 0.02 -> go
    assert ho.prefix_verdict([0.1, 0.1, 0.1, 0.1, 0.15, 0.15, 0.15, 0.15, 0.9, 0.9], 8) == ho.GO
    # rise 0.01 -> no go; the later steps (0.9) are never read
    assert ho.prefix_verdict([0.1, 0.1, 0.1, 0.1, 0.11, 0.11, 0.11, 0.11, 0.9], 8) == ho.NO_GO
    assert ho.prefix_verdict([0.1], 1) == ho.CANT_TELL and ho.prefix_verdict([0.1, 0.2], 4) == ho.CANT_TELL


def test_read_train_rewards_orders_by_step(ho, tmp_path):
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 2, "reward/mean": 0.5}, {"step": 1, "reward/mean": 0.25}, {"step": 3, "eval/greedy": 0.1}]))
    assert ho.read_train_rewards(tmp_path) == [0.25, 0.5] and ho.read_train_rewards(tmp_path / "none") == []


def test_plan_order_and_size(ho):
    settings = ho.draw_settings()
    stages = ho.plan(settings)
    # train + eval_final per seed, eval_start, prefix_eval, start, two pilots, the unbudgeted pilot
    per = len(ho.TRAIN_SEEDS) * 2 + 1 + 1 + 1 + len(ho.PILOT_SEEDS) + 1
    assert len(stages) == per * len(settings)
    kinds = [(st.stage, st.seed) for st in stages]
    first_verdict = kinds.index(("start_verdict", ho.MEASURE_SEED))
    assert first_verdict == 4 * len(settings)  # every setting's first seed, start and first-quarter evals first
    assert kinds[:4] == [("train", 1000), ("eval_start", 0), ("prefix_eval", 1000), ("eval_final", 1000)]
    later = kinds[first_verdict:]
    assert max(i for i, k in enumerate(later) if k[0] in ("pilot", "pilot_full", "start_verdict")) < later.index(
        ("train", ho.TRAIN_SEEDS[1]))
    # every later seed is evaluated right after it trains (its model is then deleted)
    assert all(later[i + 1] == ("eval_final", k[1]) for i, k in enumerate(later) if k[0] == "train")
    assert len({st.record_path(Path("r")) for st in stages}) == len(stages)


def test_run_command_measures_cpu_seconds(ho, tmp_path):
    rc, cpu, wall = ho.run_command([sys.executable, "-c", "sum(i * i for i in range(3 * 10**6))"], tmp_path / "l.log")
    assert rc == 0 and cpu > 0.05 and wall >= cpu * 0.5
    rc, _, _ = ho.run_command([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "l.log")
    assert rc == 3 and "$ " in (tmp_path / "l.log").read_text()


def test_check_catches_a_tiny_setting_its_tokenizer_cannot_read(ho, tmp_path):
    import dataclasses

    s = next(x for x in ho.candidate_pools()["tiny"] if x.task == "short_arith")
    assert ho.check_setup(s, tmp_path)["ok"]  # warm start with the printable alphabet
    r = ho.check_setup(dataclasses.replace(s, warm=()), tmp_path)  # the default alphabet has no 'W'
    assert not r["ok"] and "cannot encode the characters 'W'" in r["error"]


def test_dry_run_says_its_cost_is_an_estimate(ho):
    text = ho.dry_run(ho.draw_settings())
    assert "ESTIMATED" in text and "not a measurement" in text and text.count("\n") == 2 * 26 + 2
    assert "--set 'task.options.ops=\"-\"'" in text  # the exact overrides are printed


def test_pilot_budget_is_a_quarter_of_the_first_seeds_cpu_seconds(ho, tmp_path):
    """Protocol v2: CPU, not wall -- a seed trained on a loaded machine (wall 693 s for 88 CPU s in v1's
    one record) must not grant a later pilot several times a quarter of the run's work."""
    s = ho.draw_settings()[0]
    assert ho.budget_for(s, tmp_path) is None
    _write(tmp_path, s.name, "train", ho.TRAIN_SEEDS[0], {"final": "x"}, 88.0)
    rec = ho.Stage(s, "train", ho.TRAIN_SEEDS[0]).record_path(tmp_path)
    rec.write_text(json.dumps({**json.loads(rec.read_text()), "wall_s": 693.0}))
    assert ho.budget_for(s, tmp_path) == pytest.approx(22.0)


def test_no_setting_an_earlier_protocol_ran_is_drawn_again(ho):
    names = {s.name.removesuffix("/lr-high") for s in ho.draw_settings()}
    assert not names & set(ho.RUN_BEFORE)
    again = ho._smol("digits3+1", {"digits": [3, 1], "max_operand": None, "ops": "+", "eval_fraction": 0.2})
    assert ho.in_sample_clashes([ho._with_high_lr(again)]) == ["smollm2/digits3+1/lr-high"]
