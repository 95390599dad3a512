"""The tiny Llama: size, determinism, config plumbing and validation."""

import pytest
import torch
from transformers import LlamaForCausalLM

from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok)


def test_architecture_and_parameter_count(tok, model):
    assert isinstance(model, LlamaForCausalLM)
    n = sum(p.numel() for p in model.parameters())
    V, H, F, L = len(tok), 192, 512, 4
    # embed + untied head + per layer (q,k,v,o + gate,up,down + 2 RMSNorms) + final norm
    expected = V * H + V * H + L * (4 * H * H + 3 * H * F + 2 * H) + H
    assert n == expected == 1_796_544
    assert 1_500_000 <= n <= 2_000_000
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_config_carries_tokenizer_ids(tok, model):
    cfg = model.config
    assert cfg.vocab_size == len(tok)
    assert (cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id) == (0, 1, 2)
    assert model.generation_config.eos_token_id == 2
    assert model.generation_config.pad_token_id == 0
    assert cfg.max_position_embeddings == 512 and cfg.tie_word_embeddings is False


def test_same_seed_same_weights_and_rng_untouched(tok, model):
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    again = build_tiny_model(tok, seed=0)
    after = torch.rand(3)
    assert torch.equal(before, after)  # global RNG not consumed by the build
    for (name, a), (_, b) in zip(
        model.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    other = build_tiny_model(tok, seed=1)
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)


def test_forward_and_generate(tok, model):
    batch = tok(["1+2=", "13+24="], padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    assert out.logits.shape == (2, batch["input_ids"].shape[1], len(tok))
    assert torch.isfinite(out.logits).all()
    ids = tok("1+2=", return_tensors="pt")["input_ids"]
    gen = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert gen.shape[1] <= ids.shape[1] + 4


def test_custom_config_gqa_and_tied(tok):
    m = build_tiny_model(
        tok,
        TinyModelConfig(
            hidden_size=96,
            num_attention_heads=6,
            num_key_value_heads=2,
            num_hidden_layers=2,
            tie_word_embeddings=True,
        ),
    )
    assert m.config.num_key_value_heads == 2
    assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"hidden_size": 190}, "divisible"),
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"num_attention_heads": -1}, "num_attention_heads"),
        ({"num_key_value_heads": 3}, "divide"),
        ({"hidden_size": 12, "num_attention_heads": 4}, "even"),
        ({"rms_norm_eps": 0.0}, "rms_norm_eps"),
        ({"attn_implementation": "flash"}, "attn_implementation"),
        ({"hidden_size": 192.0}, "hidden_size"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TinyModelConfig(**kwargs)


def test_tokenizer_without_pad_is_rejected():
    t = build_tokenizer()
    t.pad_token = None
    with pytest.raises(ValueError, match="pad"):
        build_tiny_model(t)
