"""examples/chat_gsm8k.yaml end to end on a tiny Qwen2-shaped instruct model (built in the test, no
downloads): a GSM8K-format JSONL, the chat template, RLSD with LoRA, no hand-set n_train / n_eval.
Two steps train; sample completions and eval completions are written; the saved model carries its
chat template and stop tokens and generates from a chat prompt."""

import json
from pathlib import Path

import pytest
from chat_helpers import make_chat_model_dir, write_gsm8k_jsonl

from grpolab.cli import main as cli_main
from grpolab.config import load_config
from grpolab.models import load_model, stop_token_ids
from grpolab.rollout import sample
from grpolab.train import train
from grpolab.train.metrics_log import read_metrics

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "chat_gsm8k.yaml"
FAST = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8", "trainer.steps=2",
        "trainer.eval_every=2", "trainer.save_every=2", "trainer.preflight=false", "log.completions_every=1",
        "log.progress=false", "log.plots=false", "log.tensorboard=false", "model.device=cpu"]


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("chat")
    model_dir = make_chat_model_dir(tmp / "tiny-Qwen2-Instruct")
    data = write_gsm8k_jsonl(tmp / "gsm8k_train.jsonl", 40)
    cfg = load_config(EXAMPLE, [f"model.path={model_dir}", f"task.options.path={data}",
                                f"trainer.run_dir={tmp / 'run'}", "log.metric_names=both", *FAST])
    logs = []
    result = train(cfg, log=logs.append)
    return tmp, cfg, result, logs


def test_example_config_is_the_new_user_path():
    cfg = load_config(EXAMPLE)
    assert cfg.credit.name == "rlsd" and cfg.task.chat_template == "auto" and cfg.model.lora
    assert cfg.task.n_train is None and cfg.task.n_eval is None and cfg.model.dtype == "auto"


def test_rlsd_on_a_chat_model_trains_two_steps(chat_run):
    tmp, cfg, result, logs = chat_run
    assert result.steps == 2
    assert any("the tokenizer's chat template" in line for line in logs)
    rows = read_metrics(tmp / "run")
    assert [r["step"] for r in rows] == [1, 2]
    assert set(rows[0]) == set(rows[1])                                        # the same keys on every row
    assert rows[0]["credit/lam"] == pytest.approx(0.5)
    # verl-style aliases (opt-in: log.metric_names=both)
    assert {"actor/pg_clipfrac", "critic/score/mean", "response_length/mean", "actor/ppo_kl"} <= set(rows[0])
    comps = [json.loads(x) for x in (tmp / "run" / "completions.jsonl").read_text().splitlines()]
    assert [c["step"] for c in comps] == [1, 1, 2, 2]
    assert all(c["prompt"].endswith("<|im_start|>assistant\n") and c["reference"].isdigit() for c in comps)
    assert "You are a helpful assistant." in comps[0]["prompt"]


def test_saved_model_generates_with_its_chat_template(chat_run):
    tmp, cfg, _, _ = chat_run
    final = tmp / "run" / "final"
    assert not (final / "adapter_config.json").exists()                       # lora_save: merged
    model, tok = load_model(final)
    assert tok.chat_template and stop_token_ids(model, tok) == [tok.eos_token_id,
                                                                tok.convert_tokens_to_ids("<|im_end|>")]
    ids = tok.apply_chat_template([{"role": "user", "content": "How many clips?"}], add_generation_prompt=True,
                                  tokenize=True, return_dict=True)["input_ids"]
    r = sample(model, [list(ids)], group_size=1, max_new_tokens=4, greedy=True,
               eos_token_id=stop_token_ids(model, tok), pad_token_id=tok.pad_token_id)
    assert r.response_mask.sum() >= 1
    assert not any("lora" in k for k in model.state_dict())


def test_eval_uses_the_runs_settings_and_writes_completions(chat_run, capsys):
    tmp, cfg, _, _ = chat_run
    out = tmp / "eval.jsonl"
    assert cli_main(["eval", str(tmp / "run"), "--samples", "0", "--completions", str(out)]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["max_new_tokens"] == 8 and report["chat_template"] == "on"
    assert report["items"] == 4                                                # every eval row (10% of 40)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 4 and all(r["prompt"].endswith("<|im_start|>assistant\n") for r in rows)
    assert "| prompt | completion |" in captured.err


def test_too_few_rows_is_one_error_line_naming_the_fix(chat_run, capsys):
    tmp, _, _, _ = chat_run
    rc = cli_main(["train", str(EXAMPLE), "--set", f"model.path={tmp / 'tiny-Qwen2-Instruct'}",
                   "--set", f"task.options.path={tmp / 'gsm8k_train.jsonl'}", "--set", "task.n_train=4096",
                   "--set", "task.n_eval=256", "--set", f"trainer.run_dir={tmp / 'run2'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ")
    assert "--set task.n_train=36" in err[0] and "--set task.n_eval=4" in err[0]


@pytest.mark.parametrize("credit", ["gear", "grpo"])
def test_gear_and_grpo_on_the_chat_model_without_lora(chat_run, credit):
    tmp, _, _, _ = chat_run
    cfg = load_config(EXAMPLE, [f"model.path={tmp / 'tiny-Qwen2-Instruct'}",
                                f"task.options.path={tmp / 'gsm8k_train.jsonl'}", "model.lora={}",
                                f"credit.name={credit}", "credit.privileged_placement=system",
                                f"trainer.run_dir={tmp / ('run_' + credit)}", *FAST, "trainer.steps=1",
                                "trainer.eval_every=1", "trainer.save_every=1"])
    assert train(cfg, log=lambda *_: None).steps == 1
    row = read_metrics(tmp / f"run_{credit}")[0]
    assert ("credit/kl" in row) == (credit == "gear")
    assert not (tmp / f"run_{credit}" / "final" / "adapter_config.json").exists()
