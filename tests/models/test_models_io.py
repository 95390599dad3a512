"""load_model / save_model: round trip, atomic replace, clear errors, pad fallback."""

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from grpolab.models import (
    TinyModelConfig,
    build_tiny_model,
    build_tokenizer,
    load_model,
    save_model,
)

SMALL = TinyModelConfig(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _logits(model, tok):
    batch = tok(["7+5-3=", "rev 123="], padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.eval()(**batch).logits


def _leftovers(parent, name):
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


def test_round_trip_identical_logits(tok, tmp_path):
    model = build_tiny_model(tok, SMALL, seed=3)
    target = tmp_path / "ckpt"
    assert save_model(model, tok, target) == target
    assert (target / "model.safetensors").is_file() and (target / "config.json").is_file()
    assert not (target / "pytorch_model.bin").exists()
    assert _leftovers(tmp_path, "ckpt") == []

    loaded, loaded_tok = load_model(target)
    assert not loaded.training
    assert torch.equal(_logits(loaded, loaded_tok), _logits(model, tok))
    assert loaded_tok.get_vocab() == tok.get_vocab()
    assert loaded_tok.pad_token_id == 0


def test_save_replaces_existing_directory(tok, tmp_path):
    target = tmp_path / "ckpt"
    save_model(build_tiny_model(tok, SMALL, seed=0), tok, target)
    (target / "stale.txt").write_text("from the old checkpoint")
    new = build_tiny_model(tok, SMALL, seed=1)
    save_model(new, tok, target)
    assert not (target / "stale.txt").exists()
    loaded, _ = load_model(target)
    assert torch.equal(_logits(loaded, tok), _logits(new, tok))
    assert _leftovers(tmp_path, "ckpt") == []


def test_failed_save_keeps_old_checkpoint(tok, tmp_path):
    target = tmp_path / "ckpt"
    old = build_tiny_model(tok, SMALL, seed=0)
    save_model(old, tok, target)

    class Broken:
        def save_pretrained(self, path):
            Path(path, "partial.bin").write_text("half")
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save_model(Broken(), tok, target)
    assert _leftovers(tmp_path, "ckpt") == []
    loaded, _ = load_model(target)
    assert torch.equal(_logits(loaded, tok), _logits(old, tok))


def test_save_onto_a_file_raises(tok, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    with pytest.raises(FileExistsError, match="afile"):
        save_model(build_tiny_model(tok, SMALL), tok, f)


def test_load_errors_name_path_and_missing_file(tok, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope"):
        load_model(missing)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(empty)
    (empty / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_model(empty)
    target = tmp_path / "ckpt"
    save_model(build_tiny_model(tok, SMALL), tok, target)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (target / f).unlink()
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        load_model(target)
    with pytest.raises(NotADirectoryError):
        load_model(target / "config.json")


def test_pad_falls_back_to_eos(tmp_path):
    t = build_tokenizer()
    model = build_tiny_model(t, SMALL)
    t.pad_token = None
    model.config.pad_token_id = None
    save_model(model, t, tmp_path / "nopad")
    assert AutoTokenizer.from_pretrained(tmp_path / "nopad").pad_token is None
    _, loaded_tok = load_model(tmp_path / "nopad")
    assert loaded_tok.pad_token == "<eos>" and loaded_tok.pad_token_id == loaded_tok.eos_token_id


def test_dtype(tok, tmp_path):
    save_model(build_tiny_model(tok, SMALL), tok, tmp_path / "c")
    m, _ = load_model(tmp_path / "c", dtype="bf16")
    assert m.dtype == torch.bfloat16
    m, _ = load_model(tmp_path / "c", dtype=torch.float64)
    assert m.dtype == torch.float64
    with pytest.raises(ValueError, match="dtype"):
        load_model(tmp_path / "c", dtype="int8")
