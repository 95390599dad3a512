"""Timing the sampler against Hugging Face ``generate`` on the same prompts.

The rollout part of the speed benchmarks (benchmarks/speed/real_model_speed.py, benchmarks/speed/gpu_check.py):
chat prompts of a fixed set of GSM8K-style questions, and the seconds grpolab's :func:`sample` and
transformers' ``generate`` take to draw ``G`` responses of exactly ``T`` tokens per prompt (no stop
token: both sides generate the same number of tokens), synchronising a GPU around the call.
"""

from __future__ import annotations

import time

import torch

from grpolab.rollout.sampler import left_pad, sample

__all__ = ["TIMING_QUESTIONS", "sync_device", "time_hf_generate", "time_sample", "timing_prompts"]

#: GSM8K-style questions (train split wording) the timed prompts are built from
TIMING_QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?",
    "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she needs. "
    "How much more money does Betty need?",
    "James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?",
    "Mark has a garden with flowers. He planted plants of three different colors in it. How many flowers are there?",
    "Albert is wondering how much pizza he can eat in one day. He buys 2 large pizzas and 2 small pizzas. "
    "How many pieces does he eat?",
    "Ken created a care package to send to his brother, who was away at boarding school. How much did it weigh?",
    "Alexis is applying for a new job and bought a new set of business clothes to wear to the interview.",
]


def timing_prompts(tokenizer, n: int) -> list[list[int]]:
    """``n`` prompt token lists: :data:`TIMING_QUESTIONS` in turn, through the tokenizer's chat
    template when it has one (plain text otherwise)."""
    from grpolab.tasks import PromptFormat, TaskItem

    fmt = PromptFormat(chat_template="on" if getattr(tokenizer, "chat_template", None) else "off")
    items = [TaskItem(prompt=TIMING_QUESTIONS[i % len(TIMING_QUESTIONS)] + "\nReason step by step.", reference="0")
             for i in range(n)]
    return fmt.encode(items, tokenizer)


def sync_device(model) -> None:
    dev = next(model.parameters()).device
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_sample(model, prompts, G: int, T: int, pad: int, seed: int) -> float:
    """Seconds :func:`grpolab.rollout.sample` takes for ``G`` responses of ``T`` tokens per prompt."""
    sync_device(model)
    t = time.perf_counter()
    r = sample(model, prompts, group_size=G, max_new_tokens=T, temperature=1.0, top_p=1.0, eos_token_id=None,
               pad_token_id=pad, generator=torch.Generator().manual_seed(seed))
    sync_device(model)
    dt = time.perf_counter() - t
    assert int(r.response_mask.sum()) == len(prompts) * G * T
    return dt


def time_hf_generate(model, prompts, G: int, T: int, pad: int, seed: int) -> float:
    """Seconds transformers' ``generate`` takes for the same draw (sampling at temperature 1, no
    truncation, ``min_new_tokens = max_new_tokens = T``)."""
    from transformers import GenerationConfig

    ids, mask = left_pad(prompts, pad, device=next(model.parameters()).device)
    cfg = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=T, min_new_tokens=T,
                           num_return_sequences=G, eos_token_id=None, pad_token_id=pad, use_cache=True)
    torch.manual_seed(seed)
    sync_device(model)
    t = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
    sync_device(model)
    dt = time.perf_counter() - t
    assert out.shape == (len(prompts) * G, ids.shape[1] + T), out.shape
    return dt
