"""sft.privileged_share: a share of the warm start's batches in the teacher template (issue 16)."""

import pytest
import torch

from grpolab.config import ConfigError, load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import encode_teacher_prompts
from grpolab.teacher_text import DEFAULT_TEACHER_TEMPLATE, TeacherPrompt, build_teacher_prompts
from grpolab.tasks import get_task
from grpolab.train import sft as sft_mod
from grpolab.train.warm_start import warm_start_key
from grpolab.train.sft import SFTSpec, run_sft, sft_batch
from grpolab.rollout.text import encode_completion


def _setup():
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    task = get_task("arith")
    return model, tok, task.items("train", 64), task.items("eval", 8)


def _row(ids, att, lab, i):
    n = int(att[i].sum())
    return ids[i, :n].tolist(), lab[i, :n].tolist()


def test_teacher_rows_are_the_teacher_prompt_then_the_same_demonstration():
    tok = build_tokenizer()
    items = get_task("arith").items("train", 4)
    ids, att, lab = sft_batch(tok, items, "cpu", teacher_rows=2)
    t_ids, t_mask = encode_teacher_prompts(tok, build_teacher_prompts(items[:2], DEFAULT_TEACHER_TEMPLATE))
    for i, it in enumerate(items):
        row, labels = _row(ids, att, lab, i)
        comp = encode_completion(tok, it.demonstration)
        if i < 2:  # the teacher forward's own tokenisation of the privileged prompt
            prompt = t_ids[i][t_mask[i].bool()].tolist()
            text = tok.decode(prompt, skip_special_tokens=True)
            assert "here is a reference solution: " + it.privileged in text
        else:
            prompt = [tok.bos_token_id] + list(tok(it.prompt, add_special_tokens=False)["input_ids"])
        assert row == prompt + comp
        # loss only on the demonstration + EOS, identical for both kinds of row
        assert labels == [-100] * len(prompt) + comp
    # no teacher rows: the plain batch, unchanged
    ids0, att0, lab0 = sft_batch(tok, items, "cpu")
    for i in (2, 3):
        assert _row(ids0, att0, lab0, i) == _row(ids, att, lab, i)
    assert _row(ids0, att0, lab0, 0) != _row(ids, att, lab, 0)


def test_teacher_rows_follow_the_template_given():
    tok = build_tokenizer()
    items = get_task("arith").items("train", 2)
    ids, att, _ = sft_batch(tok, items, "cpu", teacher_rows=1,
                            teacher=TeacherPrompt(template="{privileged}\n{prompt}"))
    row, _ = _row(ids, att, ids, 0)
    assert tok.decode(row, skip_special_tokens=True).startswith(f"{items[0].privileged}\n{items[0].prompt}")
    with pytest.raises(ValueError, match="teacher_rows"):
        sft_batch(tok, items, "cpu", teacher_rows=3)


def test_run_sft_shows_the_share_of_every_batch_in_the_teacher_template(monkeypatch):
    model, tok, train, held = _setup()
    seen = []
    real = sft_mod.sft_batch

    def spy(tokenizer, items, device, **kw):
        seen.append((len(items), kw.get("teacher_rows", 0), kw["teacher"].template))
        return real(tokenizer, items, device, **kw)

    monkeypatch.setattr(sft_mod, "sft_batch", spy)
    run_sft(model, tok, train, held, SFTSpec(max_steps=3, batch_size=8, lr=1e-3, target_accuracy=1.0, eval_every=10,
            max_new_tokens=4, privileged_share=0.25, teacher=TeacherPrompt(template="{reference}\n{prompt}")),
            log=lambda s: None)
    assert seen == [(8, 2, "{reference}\n{prompt}")] * 3
    seen.clear()
    run_sft(model, tok, train, held, SFTSpec(max_steps=2, batch_size=8, lr=1e-3, target_accuracy=1.0, eval_every=10,
            max_new_tokens=4), log=lambda s: None)
    assert [s[1] for s in seen] == [0, 0]


def test_teacher_share_changes_training_and_teaches_the_privileged_prompt():
    # same seed, same items: the only difference is the share; the loss on teacher-template
    # inputs falls further when the model is trained on them
    torch.manual_seed(0)
    items = get_task("arith").items("train", 64)
    tok = build_tokenizer()
    t_ids, t_att, t_lab = sft_batch(tok, items[:32], "cpu", teacher_rows=32)
    losses = {}
    for share in (0.0, 0.5):
        model, tok, train, held = _setup()
        run_sft(model, tok, train, held, SFTSpec(max_steps=40, batch_size=16, lr=3e-3, target_accuracy=1.0,
                eval_every=1000, max_new_tokens=4, privileged_share=share), log=lambda s: None)
        with torch.no_grad():
            losses[share] = float(model(input_ids=t_ids, attention_mask=t_att, labels=t_lab).loss)
    assert losses[0.5] < losses[0.0]


def test_privileged_share_validated():
    model, tok, train, held = _setup()
    for bad in (-0.1, 1.0, True):
        with pytest.raises(ValueError, match="privileged_share"):
            run_sft(model, tok, train, held, SFTSpec(max_steps=1, batch_size=4, lr=1e-3, target_accuracy=1.0,
                    eval_every=1, max_new_tokens=4, privileged_share=bad), log=lambda s: None)
    with pytest.raises(ValueError, match="template"):
        run_sft(model, tok, train, held, SFTSpec(max_steps=1, batch_size=4, lr=1e-3, target_accuracy=1.0,
                eval_every=1, max_new_tokens=4, privileged_share=0.5, teacher=TeacherPrompt(template="no fields")),
                log=lambda s: None)
    with pytest.raises(ConfigError, match="sft.privileged_share"):
        load_config(overrides={"sft.privileged_share": "1.5"})
    assert load_config(overrides={"sft.privileged_share": "0.5"}).sft.privileged_share == 0.5


def test_multi_turn_transcripts_cannot_take_the_teacher_template():
    tok = build_tokenizer()
    items = get_task("arith").items("train", 2)
    items[0].meta["transcript"] = [["act", "1+1"], ["obs", "=2"]]
    with pytest.raises(ValueError, match="single-turn"):
        sft_batch(tok, items, "cpu", teacher_rows=1)


def test_warm_start_key_holds_the_teacher_template_only_when_it_was_used():
    plain = warm_start_key(load_config(overrides={}))
    assert "teacher_template" not in plain  # caches of earlier runs keep their key
    a = warm_start_key(load_config(overrides={"sft.privileged_share": "0.5"}))
    b = warm_start_key(load_config(overrides={"sft.privileged_share": "0.5", "credit.template": "{privileged}\n{prompt}"}))
    assert a["teacher_template"] == DEFAULT_TEACHER_TEMPLATE
    assert a != b and a["sft"]["privileged_share"] == 0.5


def test_warm_start_key_marks_demonstrations_in_the_run_prompt_format(tmp_path):
    """Warm starts cached before the demonstrations followed the run's prompt format (a chat-template
    model, or a system prompt) are not reused; the tiny default's key is unchanged."""
    assert "demonstrations" not in warm_start_key(load_config(overrides={}))
    chat = warm_start_key(load_config(overrides={"model.path": str(tmp_path)}))
    assert chat["demonstrations"] == "in the run's prompt format" and "teacher_chat" not in chat
    plain = warm_start_key(load_config(overrides={"model.path": str(tmp_path), "task.chat_template": "off"}))
    assert "demonstrations" not in plain
    system = warm_start_key(load_config(overrides={"task.system_prompt": "be brief"}))
    assert system["demonstrations"] == "in the run's prompt format"
    share = warm_start_key(load_config(overrides={"model.path": str(tmp_path), "sft.privileged_share": "0.5"}))
    assert share["teacher_chat"]["privileged_placement"] == "user"
