"""Demonstration text into token ids and sampled ids back into text (prompts are encoded by
:mod:`grpolab.rollout.prompts`)."""

from __future__ import annotations

import torch

__all__ = ["assistant_turn_end", "decode_responses", "encode_completion"]

_MARK = "grpolab demonstration"


def encode_completion(tokenizer, text: str, end: list[int] | None = None) -> list[int]:
    """Token ids of a demonstration completion followed by ``end`` (default: ``[EOS]``)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids + ([tokenizer.eos_token_id] if end is None else list(end))


def assistant_turn_end(tokenizer) -> list[int]:
    """The ids the chat template puts after an assistant turn's content, up to and including its
    first special token (ChatML: ``<|im_end|>``; Llama 3: ``<|eot_id|>``): how a demonstration ends
    on a chat-template run. ``[EOS]`` when the template writes no special token there."""
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _MARK}]
    text = tokenizer.apply_chat_template(msgs, tokenize=False)
    at = text.rfind(_MARK)
    if at >= 0:
        special = set(tokenizer.all_special_ids)
        tail = list(tokenizer(text[at + len(_MARK):], add_special_tokens=False)["input_ids"])
        for i, t in enumerate(tail):
            if t in special:
                return tail[:i + 1]
    return [tokenizer.eos_token_id]


def decode_responses(tokenizer, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
    """Decode each row's generated tokens (mask = 1), dropping special tokens such as EOS."""
    ids = response_ids.tolist()
    lengths = response_mask.sum(-1).long().tolist()
    return [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(ids, lengths)]
