"""One door into a run (grpolab.runs.open_run): every command that trains or measures a chat-template
run reports the format it uses and prompts through the template; the tiny default stays plain text.

A spy on the single-turn collector records the prompt text and stop ids of every collection, so
the tests see what each command really fed the model, not only what it printed."""

import json
from pathlib import Path

import pytest
from chat_helpers import make_chat_model_dir, write_gsm8k_jsonl

from grpolab.cli import main
from grpolab.runs import open_run
from grpolab.rollout.collector import SingleTurnCollector

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "chat_gsm8k.yaml"
CHAT_LINE = "prompts: the tokenizer's chat template"
ASSISTANT = "<|im_start|>assistant\n"
FAST = ["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "trainer.steps=1",
        "trainer.eval_every=1", "trainer.save_every=1", "trainer.preflight=false", "log.progress=false",
        "log.plots=false", "log.tensorboard=false", "model.device=cpu", "model.lora={}", "credit.name=grpo",
        "task.n_eval=4"]


@pytest.fixture
def spy(monkeypatch):
    """Every single-turn collection: (prompt texts, stop ids)."""
    calls = []
    real = SingleTurnCollector.collect

    def collect(self, model, items, **kw):
        calls.append((self.prompt_texts(items), self.stop_ids))
        return real(self, model, items, **kw)

    monkeypatch.setattr(SingleTurnCollector, "collect", collect)
    return calls


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openrun")
    model_dir = make_chat_model_dir(tmp / "tiny-chat")  # no "instruct" in the name: the template decides
    data = write_gsm8k_jsonl(tmp / "gsm8k.jsonl", 40)
    sets = [f"model.path={model_dir}", f"task.options.path={data}", *FAST]
    cfg_file = tmp / "chat.yaml"
    cfg_file.write_text(EXAMPLE.read_text())
    args = [a for s in sets for a in ("--set", s)]
    assert main(["train", str(cfg_file), *args, "--set", f"trainer.run_dir={tmp / 'run'}"]) == 0
    return tmp, model_dir, cfg_file, args


def _all_chat(calls):
    """Every collection prompted through the chat template and stops on the turn end <|im_end|>."""
    from chat_helpers import build_chat_tokenizer

    assert calls, "the command collected nothing"
    im_end = build_chat_tokenizer().convert_tokens_to_ids("<|im_end|>")
    return all(all(p.endswith(ASSISTANT) for p in texts) and im_end in stops for texts, stops in calls)


def test_train_reports_and_uses_the_template(chat, spy, capsys):
    tmp, model_dir, cfg_file, args = chat
    assert main(["train", str(cfg_file), *args, "--set", f"trainer.run_dir={tmp / 'run2'}"]) == 0
    assert CHAT_LINE in capsys.readouterr().out and _all_chat(spy)


def test_eval_reports_and_uses_the_template(chat, spy, capsys):
    tmp, *_ = chat
    assert main(["eval", str(tmp / "run"), "--samples", "0", "--examples", "0"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["chat_template"] == "on"          # stdout stays one JSON document
    assert CHAT_LINE in captured.err and _all_chat(spy)


def test_eval_of_a_bare_model_takes_the_training_config(chat, spy, capsys):
    tmp, model_dir, cfg_file, args = chat
    assert main(["eval", str(model_dir), "--config", str(cfg_file), *args, "--samples", "0", "--examples", "0"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["chat_template"] == "on" and json.loads(captured.out)["items"] == 4
    assert CHAT_LINE in captured.err and _all_chat(spy)
    spy.clear()
    assert main(["eval", str(model_dir), "--config", str(cfg_file), *args, "--set", "task.chat_template=off",
                 "--samples", "0", "--examples", "0"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["chat_template"] == "off" and "prompts: plain text" in captured.err
    assert spy and not any(p.endswith(ASSISTANT) for texts, _ in spy for p in texts)


def test_preflight_reports_and_uses_the_template(chat, spy, capsys):
    tmp, *_ = chat
    assert main(["preflight", str(tmp / "run"), "--n", "4", "--k", "2", "--no-readability", "--out",
                 str(tmp / "hr")]) == 0
    assert CHAT_LINE in capsys.readouterr().out and _all_chat(spy)
    rec = json.loads((tmp / "hr" / "preflight.json").read_text())
    assert rec["stats"]["n_items"] == 4
    # the items carry privileged text: the record and the RLSD/GEAR line say readability was turned off
    assert rec["stats"]["readability"] == {"not_measured": "turned off (--no-readability)"}
    credit = next(m for m in rec["methods"] if m["id"] == "credit")
    assert "turned off (--no-readability)" in credit["rests_on"] and "budget" not in credit["note"]


def _chat_rows(ids, att, labels=None):
    """Each row's prompt (tokens without a label, or all valid tokens) as text, and its labelled tokens."""
    from chat_helpers import build_chat_tokenizer

    tok = build_chat_tokenizer()
    out = []
    for i in range(ids.shape[0]):
        valid = att[i].bool()
        prompt = valid if labels is None else valid & (labels[i] == -100)
        target = [] if labels is None else labels[i][labels[i] != -100].tolist()
        out.append((tok.decode(ids[i][prompt].tolist()), target))
    return out


def test_diagnose_reports_and_uses_the_template(chat, spy, capsys, monkeypatch):
    tmp, model_dir, *_ = chat
    from grpolab import diagnose as diag

    probes = []  # the hidden-state probe's inputs: the run's chat prompts too
    real = diag.hidden_state_effective_ranks
    monkeypatch.setattr(diag, "hidden_state_effective_ranks",
                        lambda model, ids, att: probes.append((ids, att)) or real(model, ids, att))
    assert main(["diagnose", str(tmp / "run"), "--base", str(model_dir), "--n", "4", "--probe", "2"]) == 0
    assert CHAT_LINE in capsys.readouterr().out and _all_chat(spy)
    assert len(probes) == 2 and all(text.startswith("<|im_start|>") and ASSISTANT in text
                                    for ids, att in probes for text, _ in _chat_rows(ids, att))


def test_credit_reports_and_uses_the_template(chat, spy, capsys, monkeypatch):
    tmp, *_ = chat
    from grpolab.train.credit import CreditStep

    teacher = []  # the teacher's privileged prompts are built in the run's format (rows with A != 0 use them)
    real = CreditStep.__call__
    monkeypatch.setattr(CreditStep, "__call__",
                        lambda self, *a, **kw: teacher.append(self.uses_chat()) or real(self, *a, **kw))
    import grpolab.runs as runs

    opened = []  # the run as the credit page opened it: its config must stay the run's own
    real_open = runs.open_run
    monkeypatch.setattr(runs, "open_run", lambda *a, **kw: opened.append(real_open(*a, **kw)) or opened[-1])
    assert main(["credit", str(tmp / "run"), "--sample", "2", "--no-png"]) == 0
    assert CHAT_LINE in capsys.readouterr().out and _all_chat(spy)
    assert teacher == [True]
    # a grpo run's page uses gear's credit step, on a copy of the config: the opened run still says grpo
    assert len(opened) == 1 and opened[0].config.credit.name == "grpo"


def test_sft_checks_use_the_template(chat, spy, capsys):
    tmp, model_dir, cfg_file, args = chat
    assert main(["sft", str(cfg_file), *args, "--set", "sft.enabled=yes", "--set", "sft.max_steps=2",
                 "--set", "sft.eval_every=1", "--set", "sft.n_eval=2", "--set", "sft.batch_size=2",
                 "--set", "task.options.demonstration_field=answer",
                 "--out", str(tmp / "sft")]) == 0
    assert CHAT_LINE in capsys.readouterr().out and _all_chat(spy)     # the warm start's accuracy checks


def test_sft_trains_on_the_run_prompts(chat, monkeypatch):
    """The warm start's demonstrations follow the chat template: each row is the rendered conversation
    up to the assistant header (no loss), then the demonstration and the turn end <|im_end|>; the
    privileged rows are the credit step's teacher prompt in the same format."""
    from transformers import AutoTokenizer

    from grpolab.train import sft as sft_mod

    tmp, model_dir, cfg_file, args = chat
    batches = []
    real = sft_mod.sft_batch

    def spy_batch(tokenizer, items, device, **kw):
        out = real(tokenizer, items, device, **kw)
        batches.append((items, kw, out))
        return out

    monkeypatch.setattr(sft_mod, "sft_batch", spy_batch)
    assert main(["sft", str(cfg_file), *args, "--set", "sft.enabled=yes", "--set", "sft.max_steps=1",
                 "--set", "sft.eval_every=1", "--set", "sft.n_eval=2", "--set", "sft.batch_size=2",
                 "--set", "sft.privileged_share=0.5", "--set", "task.options.demonstration_field=answer",
                 "--out", str(tmp / "sft_chat")]) == 0
    (items, kw, (ids, att, lab)), = batches
    tok = AutoTokenizer.from_pretrained(model_dir)           # the run's tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert kw["prompt_format"].use_chat and kw["teacher_rows"] == 1
    rows = _chat_rows(ids, att, lab)
    teacher_ids = kw["teacher"].encode(items[:1], tok, kw["prompt_format"])[0]
    student_ids = kw["prompt_format"].encode(items[1:], tok)[0]
    for (text, target), it, prompt_ids in zip(rows, items, [teacher_ids, student_ids]):
        assert text == tok.decode(prompt_ids) and text.startswith("<|im_start|>") and text.endswith(ASSISTANT)
        assert target == tok(it.demonstration, add_special_tokens=False)["input_ids"] + [im_end]
    assert "Here is a reference solution" in rows[0][0] and "Here is a reference solution" not in rows[1][0]


def test_the_tiny_default_stays_plain_text(capsys):
    run = open_run(None, None, ["task.n_eval=2", "task.n_train=8", "rollout.prompts_per_step=2"])
    assert run.from_scratch and run.prompt_format.chat_template == "off" and not run.tokenizer.chat_template
    assert "prompts: plain text (no chat template) (task.chat_template=auto)" in capsys.readouterr().out
    assert run.collector.prompt_texts(run.eval_items) == [it.prompt for it in run.eval_items]


def test_a_run_directory_refuses_another_config(chat, capsys):
    tmp, _, cfg_file, _ = chat
    assert main(["eval", str(tmp / "run"), "--config", str(cfg_file)]) == 2
    assert "brings its own config" in capsys.readouterr().err
