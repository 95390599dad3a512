"""Prompt formatting (chat template / system prompt / prompt template), conversational datasets,
GSM8K answers and the 'all rows' item counts."""

import json

import pytest
from chat_helpers import build_chat_tokenizer, write_gsm8k_jsonl

from grpolab.models import build_tokenizer
from grpolab.tasks import PromptFormat, TaskItem, TooFewItems, load_dataset_task
from grpolab.tasks import ArithTask


@pytest.fixture(scope="module")
def chat_tok():
    return build_chat_tokenizer()


def test_chat_format_renders_the_tokenizers_template_with_generation_prompt(chat_tok):
    fmt = PromptFormat(chat_template="on", system_prompt="You are a helpful assistant.",
                       prompt_template="Question: {prompt}")
    item = TaskItem(prompt="How many clips?", reference="72")
    text = fmt.render(item, chat_tok)
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nQuestion: How many clips?<|im_end|>\n<|im_start|>assistant\n")
    ids = fmt.encode([item], chat_tok)[0]
    # the special tokens are single ids (not spelled out byte by byte) and nothing is prepended
    assert ids[0] == chat_tok.convert_tokens_to_ids("<|im_start|>")
    assert ids[-3:-1] != [] and chat_tok.decode(ids) == text


def test_plain_format_uses_template_and_bos():
    tok = build_tokenizer()
    fmt = PromptFormat(chat_template="off", system_prompt="be brief", prompt_template="q: {prompt}\na:")
    item = TaskItem(prompt="2+3", reference="5")
    assert fmt.render(item, tok) == "be brief\nq: 2+3\na:"
    ids = fmt.encode([item], tok)[0]
    assert ids[0] == tok.bos_token_id and tok.decode(ids[1:]) == "be brief\nq: 2+3\na:"


def test_auto_resolution(chat_tok, tmp_path):
    tiny = build_tokenizer()
    auto = PromptFormat()
    assert auto.resolve(tiny).chat_template == "off"                       # no template at all
    # a tokenizer that defines a template turns it on, whatever its model is called (no name check)
    assert auto.resolve(chat_tok).chat_template == "on"
    assert PromptFormat(chat_template="off").resolve(chat_tok).chat_template == "off"
    assert auto.resolve(chat_tok).describe() == "the tokenizer's chat template"
    assert PromptFormat(system_prompt="be brief").resolve(tiny).describe() == \
        "plain text (no chat template), system prompt 'be brief'"
    with pytest.raises(ValueError, match="chat_template=off"):
        PromptFormat(chat_template="on").resolve(tiny)
    with pytest.raises(RuntimeError, match="resolve"):
        auto.use_chat


def test_bad_templates_are_refused():
    with pytest.raises(ValueError, match=r"\{prompt\}"):
        PromptFormat(prompt_template="no field")
    with pytest.raises(ValueError, match="question"):
        PromptFormat(prompt_template="{prompt} {question}")
    with pytest.raises(ValueError, match="chat_template"):
        PromptFormat(chat_template="yes")


def test_conversation_keeps_turns_and_templates_the_last_user_turn(chat_tok):
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"}, {"role": "user", "content": "second"}]
    item = TaskItem(prompt="second", reference="1", messages=msgs)
    fmt = PromptFormat(chat_template="on", system_prompt="ignored: the row has its own", prompt_template="Q: {prompt}")
    out = fmt.messages(item)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"] == "sys" and out[1]["content"] == "first" and out[3]["content"] == "Q: second"
    assert item.messages[3]["content"] == "second"  # the item is not modified
    with pytest.raises(ValueError, match="needs a chat template"):
        PromptFormat(chat_template="off").render(item, chat_tok)


def test_tiny_tokenizer_refuses_text_it_cannot_encode():
    tok = build_tokenizer()
    fmt = PromptFormat(chat_template="off")
    with pytest.raises(ValueError, match=r"cannot encode the characters 'C'.*position 0"):
        fmt.encode([TaskItem(prompt="Calculate 3+4", reference="7")], tok)
    fmt.encode([TaskItem(prompt="calculate 3+4", reference="7")], tok)  # lower case is fine


def test_conversational_dataset_loads(tmp_path):
    p = tmp_path / "conv.jsonl"
    rows = [{"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": f"What is {i}+1?"}],
             "completion": [{"role": "assistant", "content": f"{i + 1}"}], "answer": str(i + 1)} for i in range(10)]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = load_dataset_task(p, eval_fraction=0.2)
    items = task.items("train") + task.items("eval")
    assert len(items) == 10
    it = next(x for x in items if x.prompt == "What is 3+1?")
    assert it.messages[0] == {"role": "system", "content": "Be terse."}
    assert it.demonstration == "4" and it.reference == "4"


def test_bad_conversation_row_names_the_row(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(json.dumps({"prompt": [{"role": "wizard", "content": "hi"}], "answer": "1"}) + "\n")
    with pytest.raises(ValueError, match=r"row 0 .*role='wizard'"):
        load_dataset_task(p)


def test_gsm8k_answers_split_into_reference_and_solution(tmp_path):
    task = load_dataset_task(write_gsm8k_jsonl(tmp_path / "g.jsonl", 10), prompt_field="question")
    it = task.items("train")[0]
    assert it.reference.isdigit()
    assert it.privileged.endswith(f"#### {it.reference}") and "<<" in it.privileged
    raw = load_dataset_task(tmp_path / "g.jsonl", prompt_field="question", answer_format="raw")
    assert "####" in raw.items("train")[0].reference


def test_all_rows_by_default_and_a_clear_error_when_too_few(tmp_path):
    task = load_dataset_task(write_gsm8k_jsonl(tmp_path / "g.jsonl", 30), prompt_field="question")
    n_train, n_eval = len(task.items("train")), len(task.items("eval"))
    assert n_train + n_eval == 30 and n_eval == 3
    with pytest.raises(TooFewItems, match="only 3 eval items, 256 were requested") as e:
        task.items("eval", 256)
    assert (e.value.available, e.value.requested) == (3, 256)
    assert len(ArithTask(seed=0).items("eval")) == 256  # a generated task: the documented default count
