"""The character-level tokenizer: layout, exact round trip, save/reload, task coverage."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from grpolab.models import DEFAULT_ALPHABET, SPECIAL_TOKENS, build_tokenizer
from grpolab.tasks import ArithTask, ReverseTask


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_layout_and_special_tokens(tok):
    assert len(tok) == 4 + len(set(DEFAULT_ALPHABET)) == 66
    assert (tok.pad_token, tok.bos_token, tok.eos_token, tok.unk_token) == SPECIAL_TOKENS
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2, 3)
    vocab = tok.get_vocab()
    for i, ch in enumerate(DEFAULT_ALPHABET):
        assert vocab[ch] == 4 + i


def test_alphabet_covers_the_spec(tok):
    for ch in "0123456789+-*=;# \nabcxyz(),.:?":
        assert ch in DEFAULT_ALPHABET, ch


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "\n",
        "  a  b  ",
        "\n\nx\n",
        "7+5=12;12-3=9#9",
        "rev 38194=",
        "what is (3*4)?\n answer: 12.",
        "\\boxed{3/4}",
        "  \n \n  ",
    ],
)
def test_round_trip_exact(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=DEFAULT_ALPHABET, max_size=60))
def test_round_trip_property(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text)
    assert tok.unk_token_id not in ids
    assert tok.decode(ids) == text


def test_special_tokens_added_and_skipped(tok):
    ids = tok.encode("12+3=", add_special_tokens=True)
    assert ids[0] == tok.bos_token_id and tok.eos_token_id not in ids
    assert ids[1:] == tok.encode("12+3=", add_special_tokens=False)
    assert tok.decode(ids, skip_special_tokens=True) == "12+3="
    assert tok.decode(ids + [tok.eos_token_id]) == "<bos>12+3=<eos>"


def test_unknown_characters_become_unk(tok):
    ids = tok.encode("aZ€b", add_special_tokens=False)
    assert ids == [tok.get_vocab()["a"], 3, 3, tok.get_vocab()["b"]]


def test_batch_padding_uses_pad_id(tok):
    batch = tok(["1+1=", "12+13="], padding=True, add_special_tokens=False)
    assert batch["input_ids"][0][-2:] == [0, 0]
    assert batch["attention_mask"][0] == [1, 1, 1, 1, 0, 0]


def test_save_and_reload_identical(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tok.get_vocab()
    assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id, loaded.unk_token_id) == (
        0,
        1,
        2,
        3,
    )
    for text in ["7+5=12;12-3=9#9", "  two  spaces\nand newline ", "xyz?"]:
        assert loaded.encode(text) == tok.encode(text)
        assert loaded.decode(loaded.encode(text, add_special_tokens=False)) == text


def test_every_builtin_task_string_is_in_vocab(tok):
    for task in (ArithTask(), ReverseTask()):
        for item in task.items("train", 200) + task.items("eval", 50):
            for text in (item.prompt, item.demonstration, item.reference):
                assert set(text) <= set(DEFAULT_ALPHABET), text
                assert tok.unk_token_id not in tok.encode(text, add_special_tokens=False)


def test_custom_alphabet():
    t = build_tokenizer("ab ab\n")
    assert len(t) == 4 + 4
    assert t.decode(t.encode("a b\nba", add_special_tokens=False)) == "a b\nba"


@pytest.mark.parametrize("bad", ["", "ab<", ">"])
def test_bad_alphabet_raises(bad):
    with pytest.raises(ValueError, match="alphabet"):
        build_tokenizer(bad)
