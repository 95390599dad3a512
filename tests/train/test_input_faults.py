"""Issue 62, items 4 and 6: inputs and crash leftovers that ended in a traceback, or went on
silently, are one line naming the cause and the fix (or a note), before the work they would waste:
a corrupt config.yaml and a half-written metrics.jsonl line on --resume, `--dry-run | head`, a
BERT checkpoint, the string NaN as an answer, skipped bad rows, task.n_eval beyond the prompt
space, a model with no end-of-sequence token; and the `lr` column holds the rate each step ran at."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from cli_helpers import one_error, sets, tiny_run
from grpolab.cli import main
from grpolab.train.metrics_log import read_metrics

SMALL = tiny_run(2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("inputs") / "run"
    assert main(["train", *sets(*SMALL, "optim.lr=1e-3", "optim.warmup_steps=4", f"trainer.run_dir={run}")]) == 0
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def test_lr_is_the_rate_each_step_ran_at(finished):
    # warm-up over 4 optimizer steps: step 1 runs at lr/4, step 2 at 2 lr/4 (it logged the next step's rate)
    assert [r["lr"] for r in read_metrics(finished)] == pytest.approx([2.5e-4, 5e-4], rel=1e-12)


@pytest.mark.parametrize("text,needle", [
    ("model: {hidden_size: 32\n", "is not valid YAML"),
    ("\x00\x01 not yaml \xff", "is not valid YAML"),
    ("[1, 2]\n", "does not hold a config mapping"),
])
def test_corrupt_config_yaml_on_resume(run, capsys, text, needle):
    (run / "config.yaml").write_text(text, errors="surrogateescape")
    one_error(capsys, ["train", "--resume", str(run), *sets("trainer.steps=3")],
               f"{run / 'config.yaml'} is corrupt", needle, "rewrite it from the command that started the run")


def test_half_written_metrics_line_is_dropped_with_a_note(run, capsys):
    full = (run / "metrics.jsonl").read_text()
    # killed while writing step 2's row, after checkpoint 1 (the step-2 checkpoint never came)
    shutil.rmtree(run / "checkpoints" / "step_000002")
    (run / "checkpoints" / "latest").write_text("step_000001\n")
    shutil.rmtree(run / "final")
    lines = full.splitlines()
    (run / "metrics.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"note: dropped 1 half-written line(s) of {run / 'metrics.jsonl'}" in out
    assert [r["step"] for r in read_metrics(run)] == [1, 2]
    assert all(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())


def test_half_written_last_line_note(run, capsys):
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward/me')
    capsys.readouterr()
    assert main(["train", "--resume", str(run), *sets("trainer.steps=3")]) == 0
    out = capsys.readouterr().out
    assert f"note: dropped 1 half-written line(s) of {run / 'metrics.jsonl'}" in out
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


def test_dry_run_into_a_closed_pipe(tmp_path):
    read, write = os.pipe()
    os.close(read)  # `| head` that has already exited
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-m", "grpolab.cli", "train", "--dry-run",
                           *sets(*SMALL, f"trainer.run_dir={tmp_path / 'r'}")], stdout=write,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_a_bert_checkpoint_is_refused(tmp_path, capsys):
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"], "model_type": "bert"}))
    (bert / "model.safetensors").write_bytes(b"")
    for dry in ([], ["--dry-run"]):
        one_error(capsys, ["train", *dry, *sets(*SMALL, f"model.path={bert}", f"trainer.run_dir={tmp_path / 'r'}")],
                   "is a BertForMaskedLM, not a causal language model")


def test_the_string_nan_is_no_answer_and_skipped_rows_are_counted(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(60)]
    rows[3]["answer"] = "NaN"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = ["task.name=dataset", f"task.options.path={data}", "task.n_train=8", "task.n_eval=3",
            "rollout.prompts_per_step=2", "sft.enabled=no", f"trainer.run_dir={tmp_path / 'r'}"]
    one_error(capsys, ["train", "--dry-run", *sets(*task)], "row 3", "is NaN", "on_bad_row='skip'")
    args = ["train", *sets(*[s for s in SMALL if not s.startswith("task.")], *task, "task.options.on_bad_row=skip",
                            "trainer.steps=1")]
    capsys.readouterr()
    assert main(args) == 0
    assert f"task: skipped 1 bad row(s) of {data} (on_bad_row=skip; rows 3)" in capsys.readouterr().out


def test_n_eval_beyond_the_prompt_space(tmp_path, capsys):
    one_error(capsys, ["train", "--dry-run", *sets(*SMALL[:-1], "task.n_eval=5000",
                                                     f"trainer.run_dir={tmp_path / 'r'}")],
               "task.n_eval=5000: task 'arith' could only find", "prompt space is too small")


def test_a_model_without_an_eos_token_is_warned_about(tmp_path, capsys):
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    tok.eos_token = None
    model.generation_config.eos_token_id = None
    model.config.eos_token_id = None
    src = tmp_path / "noeos"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    capsys.readouterr()
    assert main(["train", *sets(*SMALL, f"model.path={src}", "trainer.steps=1",
                                 f"trainer.run_dir={tmp_path / 'r'}")]) == 0
    out = capsys.readouterr().out
    assert f"warning: model.path={src} has no end-of-sequence token" in out and "eos_token" in out


def test_memory_sized_settings_are_checked_before_the_warm_start(tmp_path, capsys):
    from grpolab.config import ConfigError, load_config
    from grpolab.train.memory_check import ModelDims, available_bytes, check_memory

    # SmolLM2-135M's sizes: 30 layers, 3 key/value heads of 64, vocabulary 49,152, float32
    dims = ModelDims(hidden=576, layers=30, kv_width=192, vocab=49152)
    cfg = load_config(overrides=["rollout.prompts_per_step=8", "rollout.group_size=8", "rollout.max_new_tokens=256"])
    check_memory(cfg, dims, n_demos=100, available=4 << 30)  # 64 samples: 0.77 GiB of cache, fits in 4 GiB
    big = load_config(overrides=["rollout.prompts_per_step=8", "rollout.group_size=20000", "rollout.max_new_tokens=256"])
    with pytest.raises(ConfigError, match=r"8 x 20000 = 160,000 samples .* hold at least 1,.* GiB while sampling, "
                                          r"more than the 4.0 GiB available on cpu; lower rollout.group_size"):
        check_memory(big, dims, n_demos=100, available=4 << 30)
    sft = load_config(overrides=["sft.enabled=yes", "sft.batch_size=200000"])
    with pytest.raises(ConfigError, match=r"sft.batch_size=200000 \(150,000 demonstrations a step\)"):
        check_memory(sft, dims, n_demos=150000, available=4 << 30)
    # the command: refused before the model trains (the default tiny model: 32 x 20000 samples need ~176 GiB)
    if (available_bytes() or 0) > 200 << 30:
        pytest.skip("this machine has more memory than the setting needs")
    for dry in ([], ["--dry-run"]):
        one_error(capsys, ["train", *dry, *sets("rollout.group_size=20000", f"trainer.run_dir={tmp_path / 'r'}")],
                   "rollout.prompts_per_step x rollout.group_size = 32 x 20000", "lower rollout.group_size")
    assert not (tmp_path / "r").exists() or not (tmp_path / "r" / "sft").exists()


def test_a_huge_prompt_is_refused_before_tokenizing(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    rows[5]["prompt"] = "1+" * 1_000_000 + "1="  # 2 MB
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [s for s in SMALL if not s.startswith("task.")] + [  # every row is used: the long one too
        "task.name=dataset", f"task.options.path={data}", "task.n_train=all", "task.n_eval=all",
        "rollout.prompt_truncation=left", f"trainer.run_dir={tmp_path / 'r'}"]
    for dry in ([], ["--dry-run"]):
        one_error(capsys, ["train", *dry, *sets(*overrides)], "the prompt of row 5", "2,000,002 characters",
                   "times what the prompt limit of", "so it is not tokenized; shorten or drop it")
