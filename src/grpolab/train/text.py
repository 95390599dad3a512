"""Turning task text into token ids and sampled ids back into text."""

from __future__ import annotations

import torch

from grpolab.rollout.prompts import encode_prompt, encode_prompts  # the one prompt encoder

__all__ = ["decode_responses", "encode_completion", "encode_prompt", "encode_prompts"]


def encode_completion(tokenizer, text: str) -> list[int]:
    """Token ids of a demonstration completion followed by EOS."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids + [tokenizer.eos_token_id]


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode each row's generated tokens (mask = 1), dropping special tokens such as EOS."""
    ids = response_ids.tolist()
    lengths = response_mask.sum(-1).long().tolist()
    return [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(ids, lengths)]
