"""parameter_groups partitions Llama, Qwen2 and GPT-2 parameters by kind and layer."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

from grpolab.models import (
    GROUP_KINDS,
    TinyModelConfig,
    build_tiny_model,
    build_tokenizer,
    classify_parameter,
    parameter_groups,
)


def _assert_partition(model, groups):
    names = [n for n, _ in model.named_parameters()]
    kinds = [set(groups[k]) for k in GROUP_KINDS]
    assert sum(len(k) for k in kinds) == len(names)  # no parameter in two kinds
    assert set().union(*kinds) == set(names)  # none left out
    layers = sorted(int(k.split(".")[1]) for k in groups if k.count(".") == 1)
    for i in layers:
        whole = set(groups[f"layer.{i}"])
        parts = [set(groups.get(f"layer.{i}.{k}", [])) for k in GROUP_KINDS]
        assert set().union(*parts) == whole
        for k in GROUP_KINDS:
            assert set(groups.get(f"layer.{i}.{k}", [])) == whole & set(groups[k])
    return names, layers


def test_tiny_llama():
    model = build_tiny_model(build_tokenizer())
    groups = parameter_groups(model)
    names, layers = _assert_partition(model, groups)
    assert layers == [0, 1, 2, 3]
    assert groups["embed"] == ["model.embed_tokens.weight"]
    assert groups["head"] == ["lm_head.weight"]
    assert "model.norm.weight" in groups["norm"]
    assert len(groups["norm"]) == 2 * 4 + 1
    assert groups["layer.2.attention"] == [
        f"model.layers.2.self_attn.{p}_proj.weight" for p in "qkvo"
    ]
    assert groups["layer.2.mlp"] == [
        f"model.layers.2.mlp.{p}_proj.weight" for p in ("gate", "up", "down")
    ]
    assert len(groups["layer.0"]) == 9


def test_tied_llama_lists_the_shared_matrix_once():
    model = build_tiny_model(
        build_tokenizer(),
        TinyModelConfig(
            hidden_size=32, num_attention_heads=2, num_hidden_layers=1, tie_word_embeddings=True
        ),
    )
    groups = parameter_groups(model)
    _assert_partition(model, groups)
    assert groups["head"] == [] and groups["embed"] == ["model.embed_tokens.weight"]


def test_qwen2_with_biases():
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=50,
            tie_word_embeddings=False,
        )
    )
    groups = parameter_groups(model)
    _, layers = _assert_partition(model, groups)
    assert layers == [0, 1]
    assert "model.layers.1.self_attn.q_proj.bias" in groups["layer.1.attention"]
    assert groups["head"] == ["lm_head.weight"]


def test_gpt2_naming_and_tied_head():
    model = GPT2LMHeadModel(
        GPT2Config(
            n_embd=32,
            n_layer=3,
            n_head=2,
            vocab_size=50,
            n_positions=64,
            bos_token_id=0,
            eos_token_id=0,
        )
    )
    groups = parameter_groups(model)
    _, layers = _assert_partition(model, groups)
    assert layers == [0, 1, 2]
    assert groups["embed"] == ["transformer.wte.weight", "transformer.wpe.weight"]
    assert groups["head"] == []  # lm_head is tied to wte
    assert "transformer.ln_f.weight" in groups["norm"]
    assert "transformer.h.0.attn.c_proj.weight" in groups["attention"]
    assert "transformer.h.0.mlp.c_proj.weight" in groups["mlp"]
    assert set(groups["layer.1.norm"]) == {
        f"transformer.h.1.{ln}.{p}" for ln in ("ln_1", "ln_2") for p in ("weight", "bias")
    }


@pytest.mark.parametrize(
    "name, kind",
    [
        ("model.layers.0.self_attn.q_norm.weight", "norm"),  # Qwen3: a norm inside attention
        ("model.layers.7.block_sparse_moe.experts.0.w1.weight", "mlp"),
        ("gpt_neox.embed_in.weight", "embed"),
        ("embed_out.weight", "head"),
        ("model.layers.3.feed_forward.w2.weight", "mlp"),
        ("transformer.h.0.attn.c_attn.bias", "attention"),
    ],
)
def test_classify_parameter(name, kind):
    assert classify_parameter(name) == kind


def test_unknown_parameter_is_named():
    model = torch.nn.Module()
    model.mystery = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="mystery.weight"):
        parameter_groups(model)
