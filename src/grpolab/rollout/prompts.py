"""The one prompt encoder: task text -> prompt token ids, as the sampler, the episode runner and the
teacher forward all see them.

A prompt is tokenised with the tokenizer's own special tokens (``add_special_tokens=True``) and
gets a BOS in front if the tokenizer has one and did not add it, so student prompts, episode
prompts and privileged teacher prompts start the same way.
"""

from __future__ import annotations

from typing import Sequence

__all__ = ["PROMPT_TRUNCATIONS", "encode_prompt", "encode_prompts", "prompt_limit", "truncate_prompt"]

#: What happens to a prompt longer than the limit (verl's ``data.truncation``): ``error``, keep the
#: ``left``-truncated end (the last tokens), or the ``right``-truncated start (the first tokens).
PROMPT_TRUNCATIONS = ("error", "left", "right")


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


def prompt_limit(max_prompt_tokens: int, max_new_tokens: int, context: int | None) -> int:
    """The longest prompt a run takes: ``max_prompt_tokens`` (0 = no limit of its own), never above
    the model's ``context`` (its ``max_position_embeddings``; None = unknown) less ``max_new_tokens``.

    Raises:
        ValueError: the context leaves no room for a prompt after ``max_new_tokens``.
    """
    room = None if not context else int(context) - int(max_new_tokens)
    if room is not None and room < 1:
        raise ValueError(f"rollout.max_new_tokens={max_new_tokens} leaves no room for a prompt in the model's "
                         f"context of {context} tokens; lower rollout.max_new_tokens")
    limits = [n for n in (int(max_prompt_tokens) or None, room) if n]
    return min(limits) if limits else 0


def truncate_prompt(ids: list[int], limit: int, truncation: str = "error") -> list[int]:
    """``ids`` cut to ``limit`` tokens (0 = no limit): ``left`` keeps the last ``limit`` tokens (the
    end of the question and a chat template's generation prompt), ``right`` the first ones.

    Raises:
        ValueError: ``truncation="error"`` and the prompt is longer than ``limit``.
    """
    if truncation not in PROMPT_TRUNCATIONS:
        raise ValueError(f"truncation={truncation!r}; choose one of {PROMPT_TRUNCATIONS}")
    if not limit or len(ids) <= limit:
        return ids
    if truncation == "error":
        raise ValueError(f"the prompt is {len(ids)} tokens, longer than the limit of {limit}")
    return list(ids[-limit:]) if truncation == "left" else list(ids[:limit])
