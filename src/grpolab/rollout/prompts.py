"""The one prompt encoder: task text -> prompt token ids, as the sampler, the episode runner and the
teacher forward all see them.

A prompt is tokenised with the tokenizer's own special tokens (``add_special_tokens=True``) and
gets a BOS in front if the tokenizer has one and did not add it, so student prompts, episode
prompts and privileged teacher prompts start the same way.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["encode_prompt", "encode_prompts"]


def encode_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of one prompt (special tokens, and a BOS if the tokenizer has one)."""
    ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos] + ids
    return ids


def encode_prompts(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """:func:`encode_prompt` of each text."""
    return [encode_prompt(tokenizer, t) for t in texts]
