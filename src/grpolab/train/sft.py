"""Supervised warm start: next-token loss on task demonstrations, until a target accuracy.

RL needs something to reinforce: a model built from scratch solves nothing, so every reward is 0
and every group advantage is 0. ``run_sft`` trains on ``prompt -> demonstration + EOS`` pairs (loss
on completion tokens only) and stops as soon as greedy held-out accuracy reaches
``target_accuracy`` -- deliberately early, so that RL has headroom left.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import torch

from grpolab.train.evaluate import evaluate
from grpolab.train.text import encode_completion, encode_prompts


@dataclass
class SFTResult:
    steps: int
    accuracy: float
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0


def encode_transcript(tokenizer, transcript) -> tuple[list[int], list[int]]:
    """``(ids, labels)`` of a multi-turn transcript ``[[role, text], ...]`` (see grpolab.envs).

    Each ``"act"`` turn is followed by EOS (the model ends its turn with it) and is trained on;
    ``"obs"`` turns (the environment's replies) get label -100, exactly as the episode runner
    gives them response_mask 0.
    """
    ids: list[int] = []
    labels: list[int] = []
    for role, text in transcript:
        if role == "act":
            t = encode_completion(tokenizer, text)
            labels += t
        elif role == "obs":
            t = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            labels += [-100] * len(t)
        else:
            raise ValueError(f"transcript roles are 'act' and 'obs', got {role!r}")
        ids += t
    return ids, labels


def sft_batch(tokenizer, items, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids [B,L]``, ``attention_mask [B,L]`` and ``labels [B,L]`` (-100 off-completion)."""
    prompts = encode_prompts(tokenizer, [it.prompt for it in items])
    rows, labels = [], []
    for p, it in zip(prompts, items):
        if it.meta.get("transcript"):  # multi-turn: actions + EOS trained, observations masked
            c, lab = encode_transcript(tokenizer, it.meta["transcript"])
        else:
            c = lab = encode_completion(tokenizer, it.demonstration)
        rows.append(p + c)
        labels.append([-100] * len(p) + lab)
    L = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (L - len(r)) for r in rows], device=device)
    att = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in rows], device=device)
    lab = torch.tensor([r + [-100] * (L - len(r)) for r in labels], device=device)
    return ids, att, lab


def run_sft(
    model,
    tokenizer,
    train_items,
    eval_items,
    *,
    max_steps: int,
    batch_size: int,
    lr: float,
    target_accuracy: float,
    eval_every: int,
    max_new_tokens: int,
    seed: int = 0,
    log=print,
    env=None,
) -> SFTResult:
    """Train ``model`` in place on demonstrations; returns the steps taken and the final accuracy."""
    demos = [it for it in train_items if it.demonstration]
    if not demos:
        raise ValueError(
            "supervised warm start needs task items with a demonstration; this task has none "
            "(set sft.enabled=no, or start from a model that already solves some items)"
        )
    device = next(model.parameters()).device
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 20))
    start = time.time()
    history: list[dict] = []
    acc = evaluate(model, tokenizer, eval_items, max_new_tokens=max_new_tokens, env=env).accuracy
    step = 0
    while step < max_steps and acc < target_accuracy:
        model.train()
        ids, att, lab = sft_batch(tokenizer, rng.sample(demos, min(batch_size, len(demos))), device)
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        step += 1
        if step % eval_every == 0 or step == max_steps:
            acc = evaluate(model, tokenizer, eval_items, max_new_tokens=max_new_tokens, env=env).accuracy
            history.append({"step": step, "loss": loss.item(), "accuracy": acc})
            log(f"sft step {step:4d}  loss {loss.item():.3f}  greedy accuracy {acc:.3f}")
    model.eval()
    return SFTResult(steps=step, accuracy=acc, history=history, seconds=time.time() - start)
