"""The tiny default model: a ~1.8 M parameter ``LlamaForCausalLM`` built from a config.

Nothing is downloaded: the model is initialised from scratch (seeded) over the character-level
tokenizer of :mod:`grpolab.models.tokenizer`. It is small enough that a CPU can run RL on the
built-in tasks in minutes, and it is a real Llama (RMSNorm, RoPE, SwiGLU, KV cache), so the
rollout and training code paths are the ones a full-size model uses.

Defaults (vocab 66 with the default alphabet): hidden 192, 4 layers, 4 heads of 48, MLP 512,
untied head: 1,796,544 parameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

__all__ = ["TinyModelConfig", "build_tiny_model"]


@dataclass
class TinyModelConfig:
    """Architecture of the tiny Llama.

    Attributes:
        hidden_size: model width; must be divisible by ``num_attention_heads``.
        num_hidden_layers: number of decoder blocks.
        num_attention_heads: query heads.
        num_key_value_heads: key/value heads (grouped-query attention); ``None`` means equal to
            ``num_attention_heads``. Must divide ``num_attention_heads``.
        intermediate_size: SwiGLU MLP width.
        max_position_embeddings: longest sequence (prompt + completion) the model is meant for.
        rope_theta: RoPE base.
        rms_norm_eps: RMSNorm epsilon.
        initializer_range: std of the normal weight init.
        tie_word_embeddings: share the input embedding with the LM head.
        attn_implementation: "sdpa" or "eager".
    """

    hidden_size: int = 192
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int | None = None
    intermediate_size: int = 512
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    initializer_range: float = 0.02
    tie_word_embeddings: bool = False
    attn_implementation: str = "sdpa"

    def __post_init__(self) -> None:
        for field_name in (
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(
                    f"TinyModelConfig.{field_name} must be a positive int, got {value!r}"
                )
        if self.hidden_size % self.num_attention_heads != 0:
            divisors = [h for h in (2, 3, 4, 6, 8) if self.hidden_size % h == 0]
            raise ValueError(
                f"TinyModelConfig.hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}; pick a head count that divides "
                f"it (e.g. one of {divisors})"
            )
        if (self.hidden_size // self.num_attention_heads) % 2 != 0:
            raise ValueError(
                f"head dim hidden_size/num_attention_heads = "
                f"{self.hidden_size // self.num_attention_heads} must be even for RoPE; "
                "change hidden_size or num_attention_heads"
            )
        kv = self.num_key_value_heads
        if kv is not None:
            if isinstance(kv, bool) or not isinstance(kv, int) or kv <= 0:
                raise ValueError(
                    "TinyModelConfig.num_key_value_heads must be a positive int or None, "
                    f"got {kv!r}"
                )
            if self.num_attention_heads % kv != 0:
                raise ValueError(
                    f"num_key_value_heads={kv} must divide num_attention_heads="
                    f"{self.num_attention_heads} (grouped-query attention)"
                )
        for field_name in ("rope_theta", "rms_norm_eps", "initializer_range"):
            value = getattr(self, field_name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(
                    f"TinyModelConfig.{field_name} must be a positive number, got {value!r}"
                )
        if self.attn_implementation not in ("sdpa", "eager"):
            raise ValueError(
                f"TinyModelConfig.attn_implementation must be 'sdpa' or 'eager', "
                f"got {self.attn_implementation!r}"
            )


def build_tiny_model(tokenizer, config: TinyModelConfig | None = None, seed: int = 0):
    """Initialise a ``LlamaForCausalLM`` for ``tokenizer`` from ``config``, deterministically.

    The same ``(tokenizer vocab, config, seed)`` always gives bit-identical weights; the global
    torch RNG state is left untouched (the init runs under ``torch.random.fork_rng``).

    Args:
        tokenizer: supplies ``vocab_size = len(tokenizer)`` and the pad/bos/eos ids written into
            the model config (and its generation config).
        config: architecture; ``None`` means ``TinyModelConfig()``.
        seed: init seed.

    Returns:
        a float32 ``LlamaForCausalLM`` in train mode, on CPU.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if config is None:
        config = TinyModelConfig()
    if not isinstance(config, TinyModelConfig):
        raise TypeError(f"config must be a TinyModelConfig, got {type(config).__name__}")
    for special in ("pad", "bos", "eos"):
        if getattr(tokenizer, f"{special}_token_id", None) is None:
            raise ValueError(
                f"tokenizer has no {special} token; build it with grpolab.models.build_tokenizer() "
                f"or set tokenizer.{special}_token before building the model"
            )

    hf_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        num_key_value_heads=config.num_key_value_heads or config.num_attention_heads,
        max_position_embeddings=config.max_position_embeddings,
        rms_norm_eps=config.rms_norm_eps,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": float(config.rope_theta)},
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    hf_config._attn_implementation = config.attn_implementation
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(hf_config)
    model.config.grpolab_tiny = asdict(config)  # provenance, saved in config.json
    gen = model.generation_config
    gen.pad_token_id = tokenizer.pad_token_id
    gen.bos_token_id = tokenizer.bos_token_id
    gen.eos_token_id = tokenizer.eos_token_id
    return model
