"""Stand-ins for a downloaded instruct model, built in-process (no downloads): a Qwen2-architecture
model of any width with a byte-level BPE tokenizer (trained on a few sentences by the
``tokenizers`` library) that carries a Qwen-style chat template. Used by the tests, the
``benchmarks/speed/gpu_check.py`` script and its ``--dry-run``; not a model to train for real.

``make_chat_model_dir(path)`` writes a local HF directory the way a user's downloaded instruct
model looks: ``config.json`` (Qwen2, bf16 ``torch_dtype`` when asked), safetensors weights,
``generation_config.json`` whose ``eos_token_id`` lists ``<|im_end|>`` and ``<|endoftext|>``, and a
tokenizer whose own eos is ``<|endoftext|>`` (as Qwen2.5 base tokenizers are) with a chat template.
"""

from __future__ import annotations

from pathlib import Path

QWEN_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether in April and May? The answer is 72.",
    "Here is a reference solution: Natalia sold 48/2 = 24 clips in May. 48+24 = 72. #### 72",
    "Solve the problem in your own way. You are a helpful assistant. Question: Answer:",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting.",
    "0 1 2 3 4 5 6 7 8 9 10 + - * / = ( ) . , ? ! : ; # \n system user assistant",
]


def build_chat_tokenizer(vocab_size: int = 400):
    """Byte-level BPE (any text encodes) with ``<|endoftext|>`` as eos/pad and a Qwen chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"],
                                   clean_up_tokenization_spaces=False)
    fast.chat_template = QWEN_TEMPLATE
    return fast


def build_chat_model(tokenizer, *, hidden: int = 32, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                     intermediate: int = 64, seed: int = 0, vocab_size: int | None = None):
    """A randomly initialised ``Qwen2ForCausalLM`` (tied embeddings) for ``tokenizer``.

    ``vocab_size`` (default ``len(tokenizer)``) may be larger, to give the LM head a real model's
    width (Qwen2.5: 151936); ids beyond the tokenizer decode to nothing.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=vocab_size or len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, intermediate_size=intermediate,
                      max_position_embeddings=512, tie_word_embeddings=True,
                      eos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
                      pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<|im_end|>"),
                                            tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model.eval()


def make_chat_model_dir(path, *, dtype: str = "float32", **model_kw) -> Path:
    """Save a tiny Qwen2 instruct-like model + chat tokenizer to ``path``; returns the path."""
    import torch

    path = Path(path)
    tok = build_chat_tokenizer()
    model = build_chat_model(tok, **model_kw)
    if dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def write_gsm8k_jsonl(path, n: int = 40, *, conversational: bool = False) -> Path:
    """A GSM8K-format file (``question``, ``answer`` ending in ``#### N``), or TRL's conversational
    format (``prompt`` = messages, ``answer``) with ``conversational=True``."""
    import json

    path = Path(path)
    with open(path, "w") as f:
        for i in range(n):
            a, b = i + 2, (i * 7) % 13 + 1
            q = f"Natalia sold {a} clips in April and {b} clips in May. How many clips did she sell?"
            ans = f"She sold {a} + {b} = <<{a}+{b}={a + b}>>{a + b} clips.\n#### {a + b}"
            row = ({"prompt": [{"role": "user", "content": q}], "answer": ans} if conversational
                   else {"question": q, "answer": ans})
            f.write(json.dumps(row) + "\n")
    return path
