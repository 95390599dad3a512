"""load_weights_into: resuming copies the checkpoint's weights into the live model one tensor at a
time; the result is exactly load_state_dict(load_weights(...)), and bad checkpoints are refused."""

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM

from grpolab.models.lora import apply_lora
from grpolab.train.checkpoint import load_weights, load_weights_into


def _llama(seed):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=64, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg)


@pytest.mark.parametrize("lora", [False, True])
def test_same_weights_as_load_state_dict(tmp_path, lora):
    saved = _llama(0)
    if lora:
        apply_lora(saved, {"r": 2, "alpha": 4})
        with torch.no_grad():
            for n, p in saved.named_parameters():
                if "lora_B" in n:
                    p.normal_()
    saved.save_pretrained(tmp_path / "m")
    a, b = _llama(1), _llama(2)
    if lora:
        apply_lora(a, {"r": 2, "alpha": 4})
        apply_lora(b, {"r": 2, "alpha": 4})
    a.load_state_dict(load_weights(tmp_path / "m", a))
    params_before = {n: p.data_ptr() for n, p in b.named_parameters()}
    load_weights_into(b, tmp_path / "m")
    assert {n: p.data_ptr() for n, p in b.named_parameters()} == params_before  # in place
    sa, sb, ss = a.state_dict(), b.state_dict(), saved.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]) and torch.equal(sb[k], ss[k]), k
    # the tied head follows the embedding
    assert b.lm_head.weight.data_ptr() == b.model.embed_tokens.weight.data_ptr()


def test_bad_checkpoints_are_refused(tmp_path):
    _llama(0).save_pretrained(tmp_path / "m")
    state = load_file(str(tmp_path / "m" / "model.safetensors"))
    k = "model.layers.0.mlp.up_proj.weight"
    (tmp_path / "wrong_shape").mkdir()
    save_file({**state, k: torch.zeros(3, 3)}, str(tmp_path / "wrong_shape" / "model.safetensors"))
    with pytest.raises(RuntimeError, match="up_proj.weight has shape"):
        load_weights_into(_llama(1), tmp_path / "wrong_shape")
    (tmp_path / "extra").mkdir()
    save_file({**state, "model.extra.weight": torch.zeros(2)}, str(tmp_path / "extra" / "model.safetensors"))
    with pytest.raises(RuntimeError, match="model.extra.weight"):
        load_weights_into(_llama(1), tmp_path / "extra")
    (tmp_path / "missing").mkdir()
    save_file({n: v for n, v in state.items() if n != k}, str(tmp_path / "missing" / "model.safetensors"))
    with pytest.raises(RuntimeError, match="lacks parameters"):
        load_weights_into(_llama(1), tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="no \\*.safetensors"):
        load_weights_into(_llama(1), tmp_path / "empty")
