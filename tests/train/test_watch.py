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


def test_all_verifier_errors_warn_on_the_first_step():
    w = TrainingWatch(no_signal_steps=0)
    assert w.observe(1, _row(errors=31.0)) == []  # one call succeeded
    lines = w.observe(2, _row(errors=32.0))
    assert len(lines) == 1 and "every verifier call failed (32 of 32 errored" in lines[0]
    assert "task.options.reward" in lines[0]


def test_truncation_warns_above_the_share():
    w = TrainingWatch(no_signal_steps=0, truncated_frac=0.5, max_new_tokens=16)
    assert w.observe(1, _row(trunc=0.5)) == []
    lines = w.observe(2, _row(trunc=0.75))
    assert len(lines) == 1 and "75% of responses hit rollout.max_new_tokens=16" in lines[0]
    assert TrainingWatch(no_signal_steps=0, truncated_frac=1.0).observe(1, _row(trunc=1.0)) == []


def test_run_health_counts_and_headline():
    rows = [_row(signal=0.0), _row(), {**_row(signal=0.0, errors=32.0, trunc=0.9), "memory/peak_rss_mb": 700.0},
            {**_row(), "memory/peak_rss_mb": 900.0}]
    h = run_health(rows, truncated_frac=0.5)
    assert (h.steps, h.no_signal_steps, h.all_error_steps, h.truncated_steps) == (4, 2, 1, 1)
    assert h.peak_rss_mb == 900.0 and h.cuda_peak_mb is None
    assert h.headline().startswith("**Warning: 2 of 4 steps updated nothing")
    assert run_health([_row(), _row()]).headline() is None


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
        "trainer.save_every=3", "trainer.headroom=false", "log.progress=false", "log.plots=false",
        "log.tensorboard=false", "log.warn_no_signal_steps=2", "log.warn_truncated_frac=0.1", f"trainer.run_dir={run}"])
    lines: list[str] = []
    train(cfg, log=lines.append)
    warnings = [x for x in lines if x.startswith("warning:")]
    assert any("step 1: every verifier call failed (16 of 16" in x for x in warnings)
    assert any("step 2: no prompt group had reward variance in the last 2 steps" in x for x in warnings)
    rows = read_metrics(run)
    assert rows[0]["length/truncated_frac"] > 0.1  # the untrained model rarely stops within 2 tokens
    assert any(f"step 1: {rows[0]['length/truncated_frac']:.0%} of responses hit rollout.max_new_tokens=2" in x
               for x in warnings)
    assert any("3 of 3 steps updated nothing" in x for x in warnings)  # the closing line
    summary = (run / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("**Warning: 3 of 3 steps updated nothing")
    assert "- peak memory: RSS " in summary
    health = json.loads((run / "summary.json").read_text())["health"]
    assert health["steps_without_signal"] == 3 and health["steps_all_verifier_errors"] == 3
    assert health["peak_rss_mb"] > 10
    rows = read_metrics(run)
    assert all(r["memory/peak_rss_mb"] > 10 for r in rows)
    assert [r["groups/with_signal"] for r in rows] == [0.0, 0.0, 0.0]
