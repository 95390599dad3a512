"""Training warnings (no signal, every verifier failing, truncation), the report's count of steps
that updated nothing, and peak memory in every metrics row and in summary.md."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from grpolab.train.watch import REPEAT_EVERY, TrainingWatch, memory_metrics, run_health


def _row(signal=3.0, errors=0.0, scored=32.0, trunc=0.0):
    return {"groups/with_signal": signal, "reward/errors": errors, "reward/scored": scored,
            "length/truncated_frac": trunc}


def test_no_signal_warns_after_k_consecutive_steps_then_rate_limited():
    w = TrainingWatch(no_signal_steps=3)
    seen = [(s, w.observe(s, _row(signal=0.0 if s != 3 else 1.0))) for s in range(1, 9)]
    # steps 1, 2 without signal, 3 with (streak reset), 4, 5, 6 without: the warning at step 6
    warned = [s for s, lines in seen if lines]
    assert warned == [6]
    assert "no prompt group had reward variance in the last 3 steps" in seen[5][1][0]
    assert "rollout.dynamic_sampling=true" in seen[5][1][0]
    # while the streak lasts it repeats every REPEAT_EVERY steps, not every step
    later = [s for s in range(9, 9 + 2 * REPEAT_EVERY) if w.observe(s, _row(signal=0.0))]
    assert later == [6 + REPEAT_EVERY, 6 + 2 * REPEAT_EVERY]


def test_no_signal_warning_off_with_zero():
    w = TrainingWatch(no_signal_steps=0)
    assert not any(w.observe(s, _row(signal=0.0)) for s in range(1, 50))


def test_reward_errors_warn_on_the_first_failing_step_with_the_cause():
    w = TrainingWatch(no_signal_steps=0, run_dir="runs/x")
    assert w.observe(1, _row()) == []
    ex = {"error": "ValueError: boom", "reward": "mod:fn", "completion": "12", "reference": "3"}
    lines = w.observe(2, _row(errors=5.0), ex)  # some calls failed: warned at once, with the cause
    assert len(lines) == 1 and "step 2: the reward failed on 5 of 32 responses, each scored 0" in lines[0]
    assert "ValueError: boom (reward 'mod:fn'); e.g. completion '12' with reference '3'" in lines[0]
    assert "task.options.reward" in lines[0] and "RUN_DIR" not in lines[0]
    assert "this step's completions with their rewards are in runs/x/completions.jsonl" in lines[0]
    assert w.warned("errors", 2) and not w.warned("errors", 1)
    lines = TrainingWatch(no_signal_steps=0).observe(1, _row(errors=32.0), ex)
    assert "every response (32)" in lines[0]


def test_truncation_is_a_note_early_and_a_warning_when_it_persists():
    w = TrainingWatch(no_signal_steps=0, truncated_frac=0.5, max_new_tokens=16)  # early steps: 5
    assert w.observe(1, _row(trunc=0.5)) == []
    lines = w.observe(2, _row(trunc=0.75))
    assert len(lines) == 1 and lines[0].startswith("note: step 2: 75% of responses hit rollout.max_new_tokens=16")
    assert "normal in the first 5 steps while the model learns to stop" in lines[0]
    assert [w.observe(s, _row(trunc=0.9)) for s in (3, 4, 5)] == [[], [], []]  # the note is said once
    lines = w.observe(6, _row(trunc=0.6))  # persisting after the first 5 steps: a warning
    assert len(lines) == 1 and lines[0].startswith("warning: step 6: 60% of responses hit rollout.max_new_tokens=16")
    assert "after the first 5 steps" in lines[0] and "not learning to stop" in lines[0]
    assert w.observe(7, _row(trunc=0.6)) == []  # repeats at most every REPEAT_EVERY steps
    assert TrainingWatch(no_signal_steps=0, truncated_frac=1.0).observe(1, _row(trunc=1.0)) == []
    w = TrainingWatch(no_signal_steps=2, truncated_frac=0.5)  # log.warn_no_signal_steps sets the early steps
    assert w.observe(3, _row(trunc=0.9))[0].startswith("warning: step 3: 90% of responses hit the length cap")


def test_truncation_advice_agrees_with_the_preflight():
    """Both say: a longer cap or overlong shaping, not truncation masking (it hides the failures the
    model learns to stop from)."""
    from grpolab.diagnostics.preflight import CUT, preflight_from_outcomes
    from grpolab.train.watch import TRUNCATION_ADVICE

    # 40 items: 1 of 8 samples solves each, the other 7 run past the 12-token cap with the answer written
    res = preflight_from_outcomes([0.0] * 40, [[1.0] + [0.0] * 7] * 40, group_size=8, max_new_tokens=12,
                                  sampled_reasons=[[None] + [CUT] * 7] * 40,
                                  sampled_answer_seen=[[False] + [True] * 7] * 40)
    row = res.method("overlong")
    assert row.verdict == "indicated"
    assert "rollout.max_new_tokens=24" in row.set_lines
    assert any(x.startswith("objective.overlong_buffer") for x in row.set_lines)
    assert not any("mask_truncated" in x for x in row.set_lines) and "not truncation masking" in row.note
    w = TrainingWatch(no_signal_steps=1, truncated_frac=0.5, max_new_tokens=12)
    line = w.observe(2, _row(trunc=0.9))[0]
    assert line.endswith(TRUNCATION_ADVICE)
    assert "raise rollout.max_new_tokens" in line and "objective.overlong_buffer" in line
    assert "objective.mask_truncated hides these failures from the loss" in line
    assert "or set objective.mask_truncated" not in line


#: held-out-gaining SmolLM2 runs and one that did not stop (length/truncated_frac per step;
#: runs/calib, docs/results/preflight_calibration.md)
DIGITS_2_1_SEED_0 = [0.91, 0.97, 0.94, 0.88, 0.59, 0.19, 0.09, 0.06, 0.38, 0.06]  # +27.3 points
SUMS_0_50_SEED_0 = [0.91, 0.97, 0.78, 0.97, 0.88, 0.44, 0.38, 0.41, 0.34, 0.09]  # +23.0 points
CAP6_SEED_0 = [1.00, 0.97, 1.00, 1.00, 1.00, 1.00, 1.00, 0.97, 1.00, 1.00]  # +0.0 points


def _trunc_steps(*fracs):
    return [{**_row(trunc=t), "step": i} for i, t in enumerate(fracs, 1)]


def test_early_truncation_in_a_run_that_learns_to_stop_is_a_note():
    for fracs in (DIGITS_2_1_SEED_0, SUMS_0_50_SEED_0):
        h = run_health(_trunc_steps(*fracs), truncated_frac=0.5)
        assert h.truncated_steps == 5 and not h.truncation_persists and h.headline() is None
        assert h.note().startswith("Note: 5 of 10 steps had most responses truncated (all within the first 5 steps")
        w = TrainingWatch(truncated_frac=0.5, max_new_tokens=12)
        lines = [x for s, t in enumerate(fracs, 1) for x in w.observe(s, _row(trunc=t))]
        assert len(lines) == 1 and lines[0].startswith("note: step 1: ")
    # the 6-token cap never stops: a warning, live at step 6 and in the report
    h = run_health(_trunc_steps(*CAP6_SEED_0), truncated_frac=0.5)
    assert h.truncation_persists and h.late_truncated_streak == 5
    assert h.headline().startswith("**Warning: 10 steps had most responses truncated (5 in a row after the first 5 "
                                   "steps): raise rollout.max_new_tokens")
    assert h.note() is None and h.to_dict()["truncation_persists"] is True
    w = TrainingWatch(truncated_frac=0.5, max_new_tokens=6)
    lines = [x for s, t in enumerate(CAP6_SEED_0, 1) for x in w.observe(s, _row(trunc=t))]
    assert [x.split(":")[0] + ":" + x.split(":")[1] for x in lines] == ["note: step 1", "warning: step 6"]
    # a relapse at the last step after the first ones: persists (still truncated when the run ended)
    h = run_health(_trunc_steps(0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.7), truncated_frac=0.5)
    assert h.truncation_persists and "(still at the last step)" in h.headline()
    # a 2-step run truncated at both steps (the SmolLM2 example at trainer.steps=2): a note that does not claim
    # its last step was not truncated
    h = run_health(_trunc_steps(0.875, 0.53), truncated_frac=0.5)
    assert h.headline() is None
    assert h.note().startswith("Note: 2 of 2 steps had most responses truncated (all within the first 5 steps; the "
                               "run ended within them). ")
    assert "not at the last step" not in h.note()
    # scattered late steps, not at the end: a note saying how many in a row at most
    h = run_health(_trunc_steps(0.9, 0.1, 0.1, 0.1, 0.1, 0.7, 0.1, 0.1), truncated_frac=0.5)
    assert h.headline() is None and "at most 1 in a row after the first 5 steps" in h.note()


def test_run_health_counts_and_headline():
    rows = [_row(signal=0.0), _row(), {**_row(signal=0.0, errors=32.0, trunc=0.9), "memory/peak_rss_mb": 700.0},
            {**_row(), "memory/peak_rss_mb": 900.0}]
    h = run_health(rows, truncated_frac=0.5)
    assert (h.steps, h.no_signal_steps, h.all_error_steps, h.truncated_steps) == (4, 2, 1, 1)
    assert h.peak_rss_mb == 900.0 and h.cuda_peak_mb is None
    # two steps without signal and one truncated step in the first five are normal early: notes
    assert h.headline() == "**Warning: 1 step had every verifier call fail.**"
    first, second = h.note().split("\n\n")
    assert first.startswith("Note: 2 of 4 steps updated nothing (all within the first 5 steps")
    assert second.startswith("Note: 1 of 4 steps had most responses truncated (all within the first 5 steps")
    assert run_health([_row(), _row()]).headline() is None and run_health([_row()]).note() is None


def _steps(*signals):
    return [{**_row(signal=s), "step": i} for i, s in enumerate(signals, 1)]


def test_no_signal_early_is_a_note_persisting_or_most_is_a_warning():
    # the working example: the first 2 of 10 steps updated nothing, the run gained +55 points
    h = run_health(_steps(0, 0, 3, 3, 3, 3, 3, 3, 3, 3))
    assert h.headline() is None and not h.not_learning and "2 of 10 steps" in h.note()
    # persisting after the first 5 steps: 5 in a row later on
    h = run_health(_steps(3, 3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 3), early_steps=5)
    assert h.not_learning and h.headline().startswith("**Warning: 5 of 12 steps updated nothing (5 in a row after "
                                                      "the first 5 steps") and h.note() is None
    # scattered late steps, fewer than half: a note that says how many in a row at most
    h = run_health(_steps(3, 3, 3, 3, 3, 3, 0, 3, 0, 3), early_steps=5)
    assert h.headline() is None and "at most 1 in a row after the first 5 steps" in h.note()
    # most of the run, even early
    h = run_health(_steps(0, 0, 0, 3), early_steps=5)
    assert h.not_learning and "(most of the run" in h.headline()
    assert h.to_dict()["not_learning"] is True


def test_one_step_is_singular():
    h = run_health([_row(errors=32.0, trunc=0.9), _row(), _row(trunc=0.9)], early_steps=2)
    assert "1 step had every verifier call fail; 2 steps had most responses truncated (still at the last" in h.headline()
    h = run_health([_row(errors=32.0), _row(), _row(trunc=0.9)], early_steps=2)
    assert "1 step had most responses truncated (still at the last step)" in h.headline()
    assert "1 steps" not in h.headline()


def test_memory_metrics_reads_this_process():
    import resource

    m = memory_metrics()
    if sys.platform.startswith("linux"):  # this program's own peak (VmHWM)
        hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
        assert m["memory/peak_rss_mb"] * 1024 == pytest.approx(hwm, abs=64 * 1024)
    else:
        assert m["memory/peak_rss_mb"] * 1024 == resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert m["memory/peak_rss_mb"] > 10


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss across exec is a Linux property")
def test_memory_metrics_of_a_child_is_not_its_parents_peak():
    """A training child started by a big process (a benchmark, a sweep) reports its own peak:
    Linux's ru_maxrss would include the parent's RSS at fork time."""
    import subprocess

    ballast = bytearray(600 * 2**20)
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])  # resident
    code = ("import json, resource; from grpolab.train.watch import memory_metrics; "
            "print(json.dumps([memory_metrics()['memory/peak_rss_mb'], "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    del ballast
    own, maxrss = json.loads(out.strip().splitlines()[-1])
    assert maxrss > 600  # the parent's image counts in ru_maxrss ...
    assert own < 500  # ... not in the child's own peak


def test_a_run_that_cannot_learn_says_so(tmp_path, monkeypatch):
    """A reward that always fails: the trainer warns during the run (every call failed, no signal,
    truncation), summary.md leads with the count of steps that updated nothing, summary.json counts
    them, and every metrics row carries the peak RSS."""
    from grpolab.config import load_config
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    (tmp_path / "failing_reward.py").write_text(textwrap.dedent("""
        def broken(completion, reference, **options):
            raise RuntimeError("this verifier always fails")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    cfg = load_config(overrides=[
        "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
        "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
        "task.options.reward=failing_reward:broken", "sft.enabled=no", "rollout.prompts_per_step=4",
        "rollout.group_size=4", "rollout.max_new_tokens=2", "trainer.steps=3", "trainer.eval_every=3",
        "trainer.save_every=3", "trainer.preflight=false", "log.progress=false", "log.plots=false",
        "log.tensorboard=false", "log.warn_no_signal_steps=2", "log.warn_truncated_frac=0.1", f"trainer.run_dir={run}"])
    lines: list[str] = []
    train(cfg, log=lines.append)
    warnings = [x for x in lines if x.startswith("warning:")]
    reward_warnings = [x for x in warnings if "the reward failed" in x]
    assert len(reward_warnings) == 1 and "step 1: the reward failed on every response (16)" in reward_warnings[0]
    assert "RuntimeError: this verifier always fails (reward 'failing_reward:broken')" in reward_warnings[0]
    assert "e.g. completion " in reward_warnings[0] and "RUN_DIR" not in reward_warnings[0]
    assert f"this step's completions with their rewards are in {run}/completions.jsonl" in reward_warnings[0]
    logged = [json.loads(x) for x in (run / "completions.jsonl").read_text().splitlines()]
    assert logged and {r["step"] for r in logged} == {1} and all(r["reward"] == 0 for r in logged)
    assert any("step 2: no prompt group had reward variance in the last 2 steps" in x for x in warnings)
    rows = read_metrics(run)
    assert rows[0]["length/truncated_frac"] > 0.1  # the untrained model rarely stops within 2 tokens
    assert f"note: step 1: {rows[0]['length/truncated_frac']:.0%} of responses hit rollout.max_new_tokens=2" in \
        " ".join(lines)  # within the first 2 steps: a note
    late = [x for x in warnings if "of responses hit rollout.max_new_tokens=2" in x]
    assert len(late) == (rows[2]["length/truncated_frac"] > 0.1)  # step 3, after them: a warning if truncated
    assert all(x.startswith(f"warning: step 3: {rows[2]['length/truncated_frac']:.0%} of responses hit") for x in late)
    assert any("3 of 3 steps updated nothing" in x for x in warnings)  # the closing line
    summary = (run / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**Held-out greedy accuracy ")  # gains first
    assert summary.splitlines()[4].startswith("**Warning: 3 of 3 steps updated nothing (most of the run")
    assert "- peak memory: RSS " in summary
    health = json.loads((run / "summary.json").read_text())["health"]
    assert health["steps_without_signal"] == 3 and health["steps_all_verifier_errors"] == 3
    assert health["peak_rss_mb"] > 10
    rows = read_metrics(run)
    assert all(r["memory/peak_rss_mb"] > 10 for r in rows)
    assert [r["groups/with_signal"] for r in rows] == [0.0, 0.0, 0.0]
