"""Test helpers: the tiny chat model fixtures live in grpolab.models.testing (the GPU check uses them too)."""

from grpolab.models.testing import (  # noqa: F401
    QWEN_TEMPLATE,
    build_chat_model,
    build_chat_tokenizer,
    make_chat_model_dir,
    write_gsm8k_jsonl,
)
