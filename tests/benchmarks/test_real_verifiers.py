"""benchmarks/experiments/real_verifiers.py (issue 61's study): one record per run, merged into the results
file; a recorded run is skipped, a failed one is not; step rows, /usr/bin/time output and paired gains read
from synthetic files."""

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments" / "real_verifiers.py"
_spec = importlib.util.spec_from_file_location("bench_real_verifiers", _SCRIPT)
rv = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = rv  # its dataclass looks its module up
_spec.loader.exec_module(rv)

# a stand-in for `grpolab eval`: counts its runs, prints the report, writes two completions (one right)
FAKE_EVAL = r"""
import json, sys, time
from pathlib import Path
time.sleep(0.2)
folder = Path(sys.argv[1])
count = folder / "count"
count.write_text(str(int(count.read_text()) + 1 if count.exists() else 1))
if (folder / "fail").exists():
    sys.exit("boom")
rows = [{"prompt": "p1", "completion": "```python\ndef f(): return 1\n```", "reward": 1.0},
        {"prompt": "p2", "completion": "```python\ndef f(", "reward": 0.5}]
(folder / "completions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
print(json.dumps({"greedy_accuracy": 0.5, "max_new_tokens": 48}))
"""


def _args(tmp_path, name="base", force=False, ingest=False):
    return argparse.Namespace(out=tmp_path / "record.json", name=name, force=force, ingest=ingest, note="n")


def _stage(tmp_path, args):
    folder = tmp_path / args.name
    script = tmp_path / "fake_eval.py"
    script.write_text(FAKE_EVAL)
    argv = [sys.executable, str(script), str(folder)]
    rv.run_stage(args, "eval", argv, folder, lambda: rv.parse_eval(folder))
    return folder


def test_a_run_is_recorded_once_and_a_recorded_run_is_skipped(tmp_path):
    folder = _stage(tmp_path, _args(tmp_path))
    doc = json.loads((tmp_path / "record.json").read_text())
    rec = doc["runs"]["base"]
    assert rec["rc"] == 0 and rec["kind"] == "eval" and rec["note"] == "n"
    assert rec["wall_s"] >= 0.2 and rec["peak_rss_mb"] > 1  # it sleeps 0.2 s; python holds more than 1 MiB
    res = rec["result"]
    assert res["items"] == 2 and res["greedy_accuracy"] == 0.5 and res["scores"] == [1.0, 0.5]
    assert res["mean_reward"] == 0.75 and res["closed_block_frac"] == 0.5  # the second block was cut off
    _stage(tmp_path, _args(tmp_path))
    assert (folder / "count").read_text() == "1"  # resumed: not run again
    _stage(tmp_path, _args(tmp_path, force=True))
    assert (folder / "count").read_text() == "2"


def test_a_failed_run_is_recorded_with_its_error_and_run_again(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "fail").write_text("")
    _stage(tmp_path, _args(tmp_path, name="bad"))
    _stage(tmp_path, _args(tmp_path, name="other"))  # a second record is merged, the first kept
    doc = json.loads((tmp_path / "record.json").read_text())
    assert doc["runs"]["bad"]["rc"] == 1 and "boom" in doc["runs"]["bad"]["result"]["stderr_tail"]
    assert doc["runs"]["other"]["rc"] == 0
    (tmp_path / "bad" / "fail").unlink()
    _stage(tmp_path, _args(tmp_path, name="bad"))
    assert (tmp_path / "bad" / "count").read_text() == "2"
    assert json.loads((tmp_path / "record.json").read_text())["runs"]["bad"]["rc"] == 0


def test_a_run_made_by_hand_under_usr_bin_time_is_ingested_without_running(tmp_path):
    folder = tmp_path / "byhand"
    folder.mkdir()
    (folder / "rc").write_text("0\n")
    (folder / "time.txt").write_text("\tCommand being timed: \"grpolab eval\"\n"
                                     "\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:03\n"
                                     "\tMaximum resident set size (kbytes): 2048000\n")
    (folder / "stdout.txt").write_text(json.dumps({"greedy_accuracy": 1.0, "max_new_tokens": 48}))
    (folder / "completions.jsonl").write_text(json.dumps({"prompt": "p", "completion": "x", "reward": 1.0}) + "\n")
    args = _args(tmp_path, name="byhand", ingest=True)
    rv.run_stage(args, "eval", ["false"], folder, lambda: rv.parse_eval(folder))
    rec = json.loads((tmp_path / "record.json").read_text())["runs"]["byhand"]
    assert rec["wall_s"] == 3723.0 and rec["peak_rss_mb"] == 2000.0 and rec["rc"] == 0
    (folder / "time.txt").write_text("not time output\n")
    with pytest.raises(ValueError, match="not /usr/bin/time"):
        rv.timed_outside(folder)


def test_step_rows_give_per_step_times_and_means_after_the_first_step(tmp_path):
    rows = [{"step": 1, "time/step": 100.0, "time/reward": 10.0, "time/reward_frac": 0.1, "time/reward_per_s": 3.2,
             "reward/errors": 0.0},
            {"step": 2, "time/step": 60.0, "time/reward": 6.0, "time/reward_frac": 0.1, "time/reward_per_s": 5.0,
             "reward/errors": 1.0},
            {"step": 2, "eval/accuracy": 0.25},
            {"step": 3, "time/step": 40.0, "time/reward": 2.0, "time/reward_frac": 0.05, "time/reward_per_s": 16.0,
             "reward/errors": 2.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = rv.parse_train(tmp_path)
    assert res["steps"] == 3 and res["evals"] == [{"step": 2, "eval/accuracy": 0.25}]
    s = res["summary"]
    assert s["steps_in_means"] == 2 and s["time_step_mean"] == 50.0 and s["time_reward_mean"] == 4.0
    assert s["reward_frac_mean"] == pytest.approx(0.075) and s["reward_per_s_mean"] == 10.5
    assert s["reward_errors_total"] == 3.0  # errors count over every step, the first included


def _eval_record(acc, reward, prompts):
    return {"kind": "eval", "rc": 0, "result": {"greedy_accuracy": acc, "mean_reward": reward,
                                                "prompt_hashes": prompts}}


def test_paired_gains_are_per_seed_differences_on_the_same_items():
    doc = {"runs": {"base": _eval_record(0.50, 0.60, ["a", "b"]), "s1": _eval_record(0.62, 0.70, ["a", "b"]),
                    "s2": _eval_record(0.58, 0.66, ["a", "b"]), "s3": _eval_record(0.66, 0.75, ["a", "b"]),
                    "other": _eval_record(0.9, 0.9, ["a", "c"])}}
    out = rv.paired_gains(doc, "base", ["s1", "s2", "s3"])
    assert out["accuracy_gains"] == pytest.approx([0.12, 0.08, 0.16])
    assert out["mean_reward_gains"] == pytest.approx([0.10, 0.06, 0.15])
    assert out["test"]["value"] == pytest.approx(0.12) and out["test"]["n"] == 3 and out["test"]["above"] == 3
    # three seeds: the exact sign-flip p-value is at least 2/8, so even three clear gains are not "significant"
    assert out["test"]["sign_flip_p"] == pytest.approx(0.25) and out["test"]["p_value"] >= 0.25
    with pytest.raises(ValueError, match="different held-out items"):
        rv.paired_gains(doc, "base", ["s1", "other"])


def test_the_held_out_study_seeds_are_refused_and_the_coin_reward_is_a_fixed_coin():
    for seed in (1000, 1007, 2000, 2001, 3000):
        with pytest.raises(ValueError, match="frozen held-out study"):
            rv.check_seed(seed)
    assert rv.check_seed(11) == 11
    flips = [rv.coin_reward(f"answer {i}", "") for i in range(200)]
    assert set(flips) == {0.0, 1.0} and 60 < sum(flips) < 140
    assert flips == [rv.coin_reward(f"answer {i}", "") for i in range(200)]
