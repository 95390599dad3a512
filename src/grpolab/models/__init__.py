"""grpolab.models: the tiny default model and its tokenizer, HF load/save, parameter groups.

* :func:`build_tokenizer` -- character-level tokenizer over the built-in tasks' alphabet.
* :class:`TinyModelConfig`, :func:`build_tiny_model` -- a ~1.8 M parameter Llama from a config.
* :func:`load_model`, :func:`save_model` -- any HF causal LM from/to a local directory.
* :func:`parameter_groups` -- embed / attention / mlp / norm / head and per-layer groups.
* :func:`stop_token_ids` -- every id that ends a response (tokenizer EOS + generation_config list).
* :mod:`grpolab.models.lora` -- LoRA adapters through peft (imported on use: peft is optional).
"""

from grpolab.models.groups import (
    GROUP_KINDS,
    GROUP_PATTERNS,
    classify_parameter,
    layer_index,
    parameter_groups,
)
from grpolab.models.io import enable_gradient_checkpointing, load_model, save_model, stop_token_ids
from grpolab.models.tiny import TinyModelConfig, build_tiny_model
from grpolab.models.tokenizer import (DEFAULT_ALPHABET, PRINTABLE_ALPHABET, SPECIAL_TOKENS, build_tokenizer,
                                     check_encodable)

__all__ = [
    "DEFAULT_ALPHABET",
    "PRINTABLE_ALPHABET",
    "check_encodable",
    "enable_gradient_checkpointing",
    "stop_token_ids",
    "GROUP_KINDS",
    "GROUP_PATTERNS",
    "SPECIAL_TOKENS",
    "TinyModelConfig",
    "build_tiny_model",
    "build_tokenizer",
    "classify_parameter",
    "layer_index",
    "load_model",
    "parameter_groups",
    "save_model",
]
