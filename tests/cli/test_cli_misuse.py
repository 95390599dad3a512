"""Every CLI misuse of issue 35 is one ``error:`` line naming what is wrong and what is allowed,
exit code 2, before any work, with nothing written."""

from __future__ import annotations

import pytest
import torch

from grpolab.cli import main


def _run_expect_error(capsys, argv, *needles):
    with pytest.raises(SystemExit) as e:  # argparse-level errors exit through parser.exit
        main(argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("argv,needles", [
    (["eval", "RUN", "--n", "0"], ["--n", "must be >= 1"]),
    (["eval", "RUN", "--temperature", "-1"], ["--temperature", "must be > 0", "--samples 0"]),
    (["eval", "RUN", "--temperature", "nan"], ["--temperature", "not a number"]),
    (["eval", "RUN", "--samples", "-1"], ["--samples", "must be >= 0"]),
    (["eval", "RUN", "--max-new-tokens", "0"], ["--max-new-tokens", "must be >= 1"]),
    (["eval", "RUN", "--n", "ten"], ["--n", "'ten' is not a whole number"]),
    (["preflight", "RUN", "--k", "0"], ["--k", "must be >= 1"]),
    (["preflight", "RUN", "--n", "0"], ["--n", "must be >= 1"]),
    (["preflight", "RUN", "--budget", "-1"], ["--budget"]),
    (["preflight", "RUN", "--pilot", "-1"], ["--pilot"]),
    (["diagnose", "RUN", "--n", "0"], ["--n", "must be >= 1"]),
    (["diagnose", "RUN", "--probe", "0"], ["--probe", "must be >= 1"]),
    (["sweep", "--jobs", "0"], ["--jobs", "must be >= 1"]),
    (["sweep", "--seeds", "0"], ["--seeds", "must be >= 1"]),
    (["compare", "--jobs", "0"], ["--jobs", "must be >= 1"]),
    (["credit", "RUN", "--lam", "1.5"], ["--lam", "in [0, 1]"]),
    (["credit", "RUN", "--sample", "0"], ["--sample", "must be >= 1"]),
    (["train", "--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
])
def test_bad_numbers_are_one_error_line(capsys, argv, needles):
    _run_expect_error(capsys, argv, *needles)


def test_sweep_jobs_zero_writes_nothing(tmp_path, capsys):
    out = tmp_path / "sw"
    _run_expect_error(capsys, ["sweep", "--jobs", "0", "--grid", "optim.lr=1e-4,3e-4", "--out", str(out)], "--jobs")
    assert not out.exists()


def _config_error(capsys, argv, *needles):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    for n in needles:
        assert n in err, (n, err)
    return err


@pytest.mark.parametrize("override,needles", [
    ("model.device=tpu", ["model.device='tpu'", "auto, cpu, cuda, cuda:N", "mps"]),
    ("task.name=arithm", ["task.name='arithm'", "arith, dataset"]),
    ("task.options.max_digitz=2", ["task.options.max_digitz is not an option of task 'arith'", "max_digits"]),
    ("task.options.reward=bogus", ["task.options.reward", "'bogus'", "math"]),
    ("env.name=nope", ["env.name='nope'", "choose one of: miniwob"]),
])
def test_config_mistakes_are_refused_before_any_work(tmp_path, capsys, override, needles):
    run = tmp_path / "run"
    err = _config_error(capsys, ["train", "--set", override, "--set", f"trainer.run_dir={run}"], *needles)
    assert "choose one of: ," not in err  # no empty first choice
    assert not run.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_is_refused_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    _config_error(capsys, ["train", "--set", "model.device=cuda", "--set", f"trainer.run_dir={run}"],
                  "model.device='cuda'", "no CUDA GPU", "model.device=cpu")
    assert not (run / "config.yaml").exists()


def test_run_dir_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    _config_error(capsys, ["train", "--set", f"trainer.run_dir={f}"], "is a file, not a directory")
    assert f.read_text() == "x"


def test_sft_out_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    _config_error(capsys, ["sft", "--out", str(f)], "--out", "is a file")
    assert f.read_text() == "x" and not (tmp_path / "afile.partial").exists()


def test_resume_of_a_missing_path(tmp_path, capsys):
    _config_error(capsys, ["train", "--resume", str(tmp_path / "nope")], "there is no run directory there",
                  "config.yaml")


def test_sft_enabled_takes_true_false_like_every_boolean():
    from grpolab.config import load_config

    assert load_config(overrides=["sft.enabled=true"]).sft.enabled == "yes"
    assert load_config(overrides=["sft.enabled=false"]).sft.enabled == "no"
    assert load_config(overrides=["sft.enabled=no"]).sft.enabled == "no"


def test_ctrl_c_names_the_run_dir(tmp_path, capsys, monkeypatch):
    import grpolab.commands.train as train

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "train_command", interrupted)  # the name `grpolab train` calls
    rc = main(["train", "--set", f"trainer.run_dir={tmp_path / 'myrun'}"])
    err = capsys.readouterr().err
    assert rc == 130
    assert f"grpolab train --resume {tmp_path / 'myrun'}" in err and "RUN_DIR" not in err


def test_compare_baseline_checked_before_any_run(tmp_path, capsys):
    out = tmp_path / "cmp"
    _config_error(capsys, ["compare", "--vary", "objective.aggregation=token,balanced", "--baseline", "nope",
                           "--seeds", "1", "--out", str(out)], "--baseline 'nope' matches 0 variants",
                  "pass one of them exactly")
    assert not out.exists()


def test_eval_of_a_run_without_final_says_which_model(tmp_path, capsys):
    import shutil

    from grpolab.config import load_config
    from grpolab.train import train

    run = tmp_path / "run"
    train(load_config(overrides=[
        "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
        "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=32", "task.n_eval=4",
        "sft.enabled=no", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
        "trainer.steps=2", "trainer.save_every=1", "trainer.eval_every=2", "trainer.preflight=false",
        "log.progress=false", "log.plots=false", "log.tensorboard=false", f"trainer.run_dir={run}"]),
        log=lambda *_: None)
    shutil.rmtree(run / "final")
    assert main(["eval", str(run), "--samples", "0", "--examples", "0"]) == 0
    cap = capsys.readouterr()
    assert f"model: {run / 'checkpoints' / 'step_000002' / 'model'} -- {run} has no final/" in cap.out + cap.err


def test_corrupt_weights_file_is_one_error_line(tmp_path, capsys):
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32))
    d = tmp_path / "m"
    model.save_pretrained(d)
    tok.save_pretrained(d)
    w = d / "model.safetensors"
    w.write_bytes(w.read_bytes()[:500])  # truncated
    capsys.readouterr()  # (saving printed a progress bar)
    _config_error(capsys, ["eval", str(d), "--samples", "0", "--n", "2"], "model.path=",
                  "weights file cannot be read", "corrupt or truncated")


def test_warm_start_without_demonstrations_is_one_error_line(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(f'{{"prompt": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(8)))
    _config_error(capsys, ["train", "--set", "task.name=dataset", "--set", f"task.options.path={data}",
                           "--set", "rollout.prompts_per_step=2", "--set", "log.progress=false",
                           "--set", f"trainer.run_dir={tmp_path / 'run'}"],
                  "needs task items with a demonstration", "sft.enabled=no")


def test_subcommand_help_names_every_section_and_default(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "credit, env" in out and "`grpolab config` lists every key" in out
    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    # --samples, --temperature: the run's rollout settings unless given
    assert "rollout.group_size, 8 by default" in out and "rollout.temperature, 1.0 by default" in out
    assert "(default: None)" not in out
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "(default: runs/sweep)" in " ".join(capsys.readouterr().out.split())
