"""`grpolab preflight`: files written, progress, the method table on stdout, bad input as one error line."""

import json

import pytest
import yaml

from grpolab.cli import main

TINY = ["--set", "model.hidden_size=32", "--set", "model.num_layers=1", "--set", "model.num_heads=2",
        "--set", "model.intermediate_size=64", "--set", "rollout.max_new_tokens=8",
        "--set", "task.options.max_digits=1"]


def test_preflight_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "pf"
    assert main(["preflight", *TINY, "--n", "10", "--out", str(out)]) == 0
    data = json.loads((out / "preflight.json").read_text())
    assert data["stats"]["n_items"] == 10 and data["stats"]["k"] == 8 and data["stats"]["group_size"] == 8
    assert [m["method"] for m in data["methods"]] == ["GRPO", "dynamic sampling",
                                                       "overlong shaping / truncation masking", "RLSD / GEAR",
                                                       "Balanced Aggregation", "CTPO / GSPO"]
    assert all(m["verdict"] in ("indicated", "not indicated", "can't tell") for m in data["methods"])
    assert all(m["source"].startswith("docs/") for m in data["methods"])
    assert data["settings"]["task"] == "arith" and data["settings"]["items_measured"] == 10
    md = (out / "preflight.md").read_text()
    assert md.startswith("# Preflight") and "| method | verdict | rests on |" in md and "(n=10)" in md
    stdout = capsys.readouterr().out
    # the expected cost before any sampling, then the seconds estimated from the first item
    first = next(x for x in stdout.splitlines() if x.startswith("preflight:"))
    assert first == "preflight: expected cost 90 sampled responses (10 items x (1 greedy + 8))"
    assert "preflight: about " in stdout and "s for all 10 items at the first item's" in stdout
    assert data["settings"]["responses"] == 90 and data["settings"]["stage"] == "start measured"
    assert "preflight: 10/10 items x (1 greedy + 8 sampled)" in stdout and "ETA" in stdout  # progress
    assert "  GRPO " in stdout and f"wrote {out / 'preflight.json'}" in stdout


def test_preflight_budget_and_fewer_items_than_asked(tmp_path, capsys):
    out = tmp_path / "pf"
    # short_arith with operands 0..3: 16 sums, 9 held out; --n 100 measures all 9
    sets = ["--set", "task.name=short_arith", "--set", "task.options={max_operand: 3, eval_fraction: 0.5}",
            "--set", "model.tokenizer_alphabet=printable"]
    assert main(["preflight", *TINY[:8], *sets, "--n", "100", "--k", "4", "--budget", "600", "--out", str(out)]) == 0
    data = json.loads((out / "preflight.json").read_text())
    assert data["stats"]["n_items"] == 9 and data["settings"]["budget_s"] == 600
    assert "the task holds 9 held-out items; measuring all of them" in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["--budget", "-1"], "--budget"),
    (["--n", "0"], "--n"),
    (["--set", "rollout.group_size=0"], "rollout.group_size"),
])
def test_bad_input_is_one_error_line(args, needle, capsys):
    try:
        rc = main(["preflight", *args])
    except SystemExit as e:  # argparse refuses a bad value itself, with the same one-line form
        rc = e.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and needle in err[0]


def test_pilot_trains_and_measures_the_same_items_again(tmp_path, capsys):
    from grpolab.diagnostics.preflight import Pilot, pilot_verdict

    out = tmp_path / "pf"
    sets = ["--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=4", "--set", "task.n_eval=10",
            "--set", "log.plots=false", "--set", "log.tensorboard=false"]  # sft: auto (from scratch)
    assert main(["preflight", *TINY, *sets, "--n", "10", "--pilot", "2", "--out", str(out)]) == 0
    data = json.loads((out / "preflight.json").read_text())
    p = data["pilot"]
    # 10 items from a model built from scratch: not "not indicated" before (too few items), so the pilot runs
    assert p["start_verdict"] in ("indicated", "can't tell")
    assert p["steps"] == 2 and p["n_items"] == 10 and p["k"] == 8
    assert (out / "pilot" / "final" / "config.json").exists()
    assert json.loads((out / "pilot" / "summary.json").read_text())["steps"] == 2
    assert "sft:\n  enabled: 'no'" in (out / "pilot" / "config.yaml").read_text()  # the measured model, no warm start
    assert data["verdict"] == p["verdict"] == pilot_verdict(Pilot.from_dict(p)) == data["calibration"]["grpo"]
    assert data["methods"][0]["rests_on"].startswith("pilot of 2 steps")
    assert data["per_item"]["k"] == 8 and len(data["per_item"]["solved"]) == 10
    # "before" is the start's own measurement of these items (per_item is the starting model's)
    assert p["sampled"]["before"] == pytest.approx(sum(data["per_item"]["solved"]) / 80)
    assert p["sampled"]["before"] == pytest.approx(data["stats"]["sampled"]["value"])
    assert p["trainer_seed"] == yaml.safe_load((out / "pilot" / "config.yaml").read_text())["trainer"]["seed"]
    assert f"## Pilot (2 GRPO steps of this config, trainer.seed {p['trainer_seed']}," in (out / "preflight.md").read_text()
    assert "pilot: 2 GRPO steps of this config" in capsys.readouterr().out


def test_pilot_from_a_run_directory_trains_the_model_it_holds(tmp_path, capsys):
    """A run directory brings its model (final/) and its config; the pilot trains that model, not the
    config's model.path (a model built from scratch here), and measures the same items again."""
    import torch

    from grpolab.models.io import load_model

    run = tmp_path / "run"
    sets = ["--set", "rollout.prompts_per_step=2", "--set", "rollout.group_size=4", "--set", "task.n_eval=10",
            "--set", "log.plots=false", "--set", "log.tensorboard=false", "--set", "sft.enabled=no",
            "--set", "trainer.preflight=false"]
    assert main(["train", *TINY, *sets, "--set", "trainer.steps=1", "--set", f"trainer.run_dir={run}"]) == 0
    capsys.readouterr()
    start, _ = load_model(run / "final")
    with torch.no_grad():  # mark the run's model: a pilot from anything else lacks the mark
        next(start.parameters()).add_(0.5)
    start.save_pretrained(run / "final")
    out = tmp_path / "pf"
    assert main(["preflight", str(run), "--n", "10", "--pilot", "1", "--out", str(out)]) == 0
    assert f"pilot: from the run's model {run / 'final'} with {run / 'config.yaml'}" in capsys.readouterr().out
    pilot_cfg = yaml.safe_load((out / "pilot" / "config.yaml").read_text())
    assert pilot_cfg["model"]["path"] == str(run / "final") and pilot_cfg["trainer"]["steps"] == 1
    data = json.loads((out / "preflight.json").read_text())
    assert data["pilot"]["n_items"] == 10 and data["verdict"] == data["pilot"]["verdict"]
    # the pilot started from the run's (marked) weights: at most one small step away from them
    trained, _ = load_model(out / "pilot" / "final")
    moved = [(a - b).abs().max().item() for a, b in zip(start.state_dict().values(), trained.state_dict().values())]
    assert max(moved) < 0.1


def test_pilot_from_a_lora_run_trains_the_model_its_adapter_gives(tmp_path, capsys):
    """A LoRA run saved as an adapter (model.lora_save: adapter): the pilot trains its base with the adapter
    merged in -- the model the preflight measured -- not the bare base."""
    from chat_helpers import make_chat_model_dir
    from safetensors.torch import load_file, save_file

    from grpolab.models.io import load_model

    base, run = make_chat_model_dir(tmp_path / "base"), tmp_path / "run"
    sets = [x for s in (f"model.path={base}", "model.lora={r: 4}", "model.lora_save=adapter", "task.n_eval=10",
                        "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
                        "trainer.steps=1", "trainer.preflight=false", "sft.enabled=no", "log.plots=false",
                        "log.tensorboard=false", f"trainer.run_dir={run}") for x in ("--set", s)]
    assert main(["train", *sets]) == 0
    adapter = str(run / "final" / "adapter_model.safetensors")
    save_file({k: v + 0.5 if "lora_B" in k else v for k, v in load_file(adapter).items()}, adapter)
    capsys.readouterr()
    out = tmp_path / "pf"
    assert main(["preflight", str(run), "--n", "10", "--pilot", "1", "--out", str(out)]) == 0
    assert "pilot of 1 step (" in capsys.readouterr().out
    assert json.loads((out / "preflight.json").read_text())["pilot"]["n_items"] == 10
    start, bare = load_model(run / "final")[0].state_dict(), load_model(base)[0].state_dict()
    trained = load_model(out / "pilot" / "final")[0].state_dict()
    to_start = max((trained[k] - start[k]).abs().max().item() for k in start)
    to_bare = max((trained[k] - bare[k]).abs().max().item() for k in start)
    assert to_start < 0.1 < to_bare   # one small step from the adapted model, far from the bare base


def test_pilot_on_too_few_items_is_skipped_before_training(tmp_path, capsys):
    out = tmp_path / "pf"
    assert main(["preflight", *TINY, "--n", "5", "--pilot", "2", "--out", str(out)]) == 0
    assert "pilot: skipped, 5 item(s) measured" in capsys.readouterr().out
    data = json.loads((out / "preflight.json").read_text())
    assert data["pilot"] is None and data["verdict"] == "can't tell" and not (out / "pilot").exists()


def test_each_stage_is_written_as_it_finishes(tmp_path, monkeypatch):
    """The start's preflight.json/.md are on disk before the pilot trains: a pilot that fails (or is
    killed) leaves the start's measurement, marked as such."""
    import grpolab.pilot
    from grpolab.commands.preflight import preflight_command

    def boom(*a, **k):
        raise RuntimeError("the pilot's training failed")

    monkeypatch.setattr(grpolab.pilot, "train", boom)  # the trainer the pilot calls
    out = tmp_path / "pf"
    sets = ["rollout.prompts_per_step=2", "rollout.group_size=4", "task.n_eval=10", "log.plots=false"]
    with pytest.raises(RuntimeError, match="pilot's training failed"):
        preflight_command(None, overrides=[x for x in TINY if x != "--set"] + sets, n=10, pilot=2, out=str(out),
                          readability=False, log=lambda s: None)
    data = json.loads((out / "preflight.json").read_text())
    assert data["settings"]["stage"] == "start measured; pilot pending" and data["pilot"] is None
    assert data["stats"]["n_items"] == 10 and (out / "preflight.md").read_text().startswith("# Preflight")


def test_a_pilot_that_would_pass_the_budget_is_skipped():
    from grpolab.pilot import TRAIN_COST_FACTOR, pilot_estimate, skip_reason
    from grpolab.config import Config
    from grpolab.diagnostics.preflight import preflight_from_outcomes

    res = preflight_from_outcomes([0.0] * 10, [[1.0] * 2 + [0.0] * 6] * 10, group_size=8, max_new_tokens=8,
                                  settings={"seconds": 10.0, "responses": 90})
    cfg = Config()  # 32 prompts x 8 per step
    assert (cfg.rollout.prompts_per_step, cfg.rollout.group_size, TRAIN_COST_FACTOR) == (32, 8, 3.0)
    # 2 steps x 256 responses x 10/90 s x 3, plus the 10 s measurement again: 180.7 s
    assert pilot_estimate(res, cfg, 2) == pytest.approx(2 * 256 * 10 / 90 * 3 + 10)
    assert skip_reason(res, cfg, 2, 100.0) == ("its estimated 181 s would pass --budget (100 s left); raise "
                                                "--budget or lower --pilot")
    assert skip_reason(res, cfg, 2, 1000.0) is None and skip_reason(res, cfg, 2, None) is None
