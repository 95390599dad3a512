"""Multi-turn episodes: the model acts, an environment answers, until done or out of budget.

:func:`run_episodes` plays ``N`` items x ``G`` episodes each, batched across episodes, turn by
turn:

1. every live episode's context (prompt + everything so far) is left-padded into one batch and
   :func:`grpolab.rollout.sample` generates the next model turn, which ends at EOS (at most
   ``max_turn_tokens`` tokens, and never past the episode's remaining token budget). The first
   turn samples the ``G`` episodes of an item from one shared prefill; later turns re-prefill
   each context (simple, and exact: the sampler's positions and masks are those of a
   teacher-forced pass over the final sequence);
2. each episode's environment steps on the decoded turn (EOS dropped; all of a turn's steps go
   through :func:`grpolab.envs.step_envs`, which lets an environment with ``step_batch`` run
   them together, e.g. in parallel browsers) and returns an
   observation, which is tokenised and appended to the episode (a turn cut off by
   ``max_turn_tokens`` before its EOS is still passed to the environment as it stands; it is
   usually an invalid action). Episodes end when the
   environment says done, after ``max_turns`` model turns, or when the total response
   (model + observation tokens) would exceed ``max_total_tokens``; the last two are truncations
   and score 0 (the rewards the environment gave on earlier steps still count).

Output: a :class:`grpolab.rollout.Rollout` whose response holds model *and* observation tokens::

    response_ids        [B, T]  model turn 1, EOS, observation 1, model turn 2, EOS, ...
    response_mask       [B, T]  1 on model tokens (EOS included), 0 on observations and padding
    response_attention  [B, T]  1 on model and observation tokens, 0 on padding
    sample_logp         [B, T]  the sampler's log-prob on model tokens, 0 elsewhere

so observation tokens are attended to (and counted in positions) but never trained on, never
in a ratio, an aggregation normaliser or CTPO's cumulative positions (those all read
``response_mask``). ``finished`` is True for episodes the environment ended.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from grpolab.envs.base import step_envs

from .batch import Rollout
from .prompts import encode_prompt
from .sampler import SamplingSpec, left_pad, sample

__all__ = ["EpisodeBatch", "run_episodes"]


@dataclass
class EpisodeBatch:
    """The result of :func:`run_episodes` (``B = N * G`` episodes, group-contiguous).

    Attributes:
        rollout: the token batch (see the module docstring); ``response_attention`` is set.
        rewards: ``FloatTensor [B]`` episode returns (sum of step rewards; truncation adds 0).
        turns: ``LongTensor [B]`` model turns taken.
        tool_errors: ``LongTensor [B]`` steps whose info said ``tool_error``.
        invalid_actions: ``LongTensor [B]`` steps whose info said ``invalid``.
        truncated: ``BoolTensor [B]``: ended by the turn or token budget, not by the environment.
        transcripts: the text of each episode after its prompt (observations included).
        infos: the info dict of each episode's last step.
    """

    rollout: Rollout
    rewards: torch.Tensor
    turns: torch.Tensor
    tool_errors: torch.Tensor
    invalid_actions: torch.Tensor
    truncated: torch.Tensor
    transcripts: list[str] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)

    def metrics(self, prefix: str = "episode/") -> dict[str, float]:
        """Per-batch means for the step log: turns, tool errors, invalid actions, truncation."""
        B = max(len(self.rewards), 1)
        n_turns = max(int(self.turns.sum()), 1)
        obs = (self.rollout.response_attention.float() - self.rollout.response_mask).sum(-1)
        return {
            f"{prefix}turns": float(self.turns.float().mean()),
            f"{prefix}tool_errors": float(self.tool_errors.sum()) / B,
            f"{prefix}tool_errors_per_turn": float(self.tool_errors.sum()) / n_turns,
            f"{prefix}invalid_actions": float(self.invalid_actions.sum()) / B,
            f"{prefix}invalid_per_turn": float(self.invalid_actions.sum()) / n_turns,
            f"{prefix}truncated_frac": float(self.truncated.float().mean()),
            f"{prefix}observation_tokens": float(obs.mean()),
            f"{prefix}tokens": float(self.rollout.response_attention.sum(-1).float().mean()),
        }


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


_encode_prompt = encode_prompt  # the one prompt encoder (grpolab.rollout.prompts)


@dataclass
class _Episodes:
    """The ``B`` episodes of one :func:`run_episodes` call while they are played (plain lists,
    one entry per episode; turned into tensors once at the end by :meth:`batch`)."""

    envs: list
    prompts_N: list[list[int]]
    group_size: int
    ids: list[list[int]] = field(default_factory=list)       # response tokens: model turns and observations
    mask: list[list[float]] = field(default_factory=list)    # 1 on model tokens
    logp: list[list[float]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    tool_errors: list[int] = field(default_factory=list)
    invalid: list[int] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    infos: list[dict] = field(default_factory=list)

    @classmethod
    def start(cls, items: Sequence[Any], make_env: Callable[[], Any], tokenizer, G: int) -> "_Episodes":
        """Reset one environment per episode; the ``G`` episodes of an item must share its prompt."""
        B = len(items) * G
        envs = [make_env() for _ in range(B)]
        prompts_N = []
        for n, item in enumerate(items):
            texts = {envs[n * G + g].reset(item) for g in range(G)}
            if len(texts) != 1:
                raise ValueError("an environment's reset(item) must give the same prompt for every episode of the item")
            prompts_N.append(_encode_prompt(tokenizer, texts.pop()))
        return cls(envs=envs, prompts_N=prompts_N, group_size=G, ids=[[] for _ in range(B)],
                   mask=[[] for _ in range(B)], logp=[[] for _ in range(B)], texts=["" for _ in range(B)],
                   rewards=[0.0] * B, turns=[0] * B, tool_errors=[0] * B, invalid=[0] * B, done=[False] * B,
                   infos=[{} for _ in range(B)])

    def prompt(self, b: int) -> list[int]:
        return self.prompts_N[b // self.group_size]

    def add_turn(self, r: Rollout, live: list[int], budget: dict[int, int], tokenizer, eos: int,
                 max_total_tokens: int) -> list[tuple[int, str]]:
        """Append the sampled turn of each live episode (cut to its budget); returns the
        ``(episode, action text)`` pairs that go to their environments (not the truncated ones)."""
        toks_all = r.response_ids.tolist()
        lps_all = r.sample_logp.tolist()
        lens = r.response_mask.sum(-1).long().tolist()
        pending: list[tuple[int, str]] = []
        for j, b in enumerate(live):
            n = min(lens[j], budget[b])
            toks, lps = toks_all[j][:n], lps_all[j][:n]
            self.ids[b] += toks
            self.mask[b] += [1.0] * n
            self.logp[b] += lps
            self.turns[b] += 1
            ended = n > 0 and toks[-1] == eos
            action = tokenizer.decode(toks[:-1] if ended else toks, skip_special_tokens=True)
            self.texts[b] += action
            if not ended and len(self.ids[b]) >= max_total_tokens:
                continue  # out of tokens mid-turn: truncated
            pending.append((b, action))
        return pending

    def step(self, pending: list[tuple[int, str]], tokenizer, max_total_tokens: int) -> list[int]:
        """Step the environments on their actions and append the observations; returns the
        episodes that go on to another turn."""
        # all of this turn's actions at once: an environment with step_batch (browsers) runs them in parallel
        results = step_envs([self.envs[b] for b, _ in pending], [a for _, a in pending])
        still: list[int] = []
        for (b, action), res in zip(pending, results):
            self.rewards[b] += float(res.reward)
            self.infos[b] = dict(res.info)
            self.tool_errors[b] += int(bool(res.info.get("tool_error")))
            self.invalid[b] += int(bool(res.info.get("invalid")))
            if res.done:
                self.done[b] = True
                continue
            obs = _encode(tokenizer, res.observation)
            if len(self.ids[b]) + len(obs) >= max_total_tokens:
                continue  # no room for the observation and another turn: truncated
            self.ids[b] += obs
            self.mask[b] += [0.0] * len(obs)
            self.logp[b] += [0.0] * len(obs)
            self.texts[b] += res.observation
            still.append(b)
        return still

    def batch(self, pad: int, device) -> EpisodeBatch:
        """The episodes as an :class:`EpisodeBatch` (responses right-padded with ``pad``)."""
        B, G = len(self.ids), self.group_size
        prompt_ids, prompt_mask = left_pad([self.prompt(b) for b in range(B)], pad, device)
        T = max(1, max(len(x) for x in self.ids))
        resp = torch.full((B, T), pad, dtype=torch.long)
        mask = torch.zeros(B, T)
        logp = torch.zeros(B, T)
        attn = torch.zeros(B, T, dtype=torch.long)
        for b in range(B):
            L = len(self.ids[b])
            if L:
                resp[b, :L] = torch.tensor(self.ids[b])
                mask[b, :L] = torch.tensor(self.mask[b])
                logp[b, :L] = torch.tensor(self.logp[b])
                attn[b, :L] = 1
        done_t = torch.tensor(self.done)
        rollout = Rollout(
            prompt_ids=prompt_ids, prompt_mask=prompt_mask, response_ids=resp.to(device),
            response_mask=mask.to(device), sample_logp=logp.to(device),
            group_ids=torch.arange(B // G, device=device).repeat_interleave(G), finished=done_t.to(device),
            response_attention=attn.to(device),
        )
        return EpisodeBatch(
            rollout=rollout, rewards=torch.tensor(self.rewards, dtype=torch.float32),
            turns=torch.tensor(self.turns), tool_errors=torch.tensor(self.tool_errors),
            invalid_actions=torch.tensor(self.invalid), truncated=~done_t, transcripts=self.texts, infos=self.infos,
        )


def run_episodes(
    model: torch.nn.Module,
    tokenizer: Any,
    items: Sequence[Any],
    make_env: Callable[[], Any],
    *,
    group_size: int = 1,
    max_turns: int = 4,
    max_total_tokens: int = 128,
    max_turn_tokens: int = 32,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> EpisodeBatch:
    """Play ``group_size`` episodes per item, batched; see the module docstring.

    Args:
        model: a Hugging Face causal LM.
        tokenizer: its tokenizer (``eos_token_id`` ends a model turn; ``pad_token_id`` pads).
        items: ``N`` task items; ``env.reset(item)`` gives each episode's prompt.
        make_env: builds a fresh environment (called once per episode).
        group_size: ``G`` episodes per item; rows ``n*G .. n*G+G-1`` belong to item ``n``.
        max_turns: model turns per episode.
        max_total_tokens: cap on an episode's response tokens (model + observation).
        max_turn_tokens: cap on one model turn (EOS included).
        temperature, top_p, greedy, generator: as in :func:`grpolab.rollout.sample`
            (:class:`grpolab.rollout.sampler.SamplingSpec`).

    Returns:
        :class:`EpisodeBatch`.
    """
    for label, v in (("group_size", group_size), ("max_turns", max_turns),
                     ("max_total_tokens", max_total_tokens), ("max_turn_tokens", max_turn_tokens)):
        if v < 1:
            raise ValueError(f"{label} must be >= 1, got {v}")
    if not items:
        raise ValueError("need at least one item")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    if eos is None:
        raise ValueError("multi-turn episodes need a tokenizer with an eos_token_id (it ends each model turn)")
    device = next(model.parameters()).device
    G = group_size
    spec = SamplingSpec(temperature=temperature, top_p=top_p, greedy=greedy)
    eps = _Episodes.start(items, make_env, tokenizer, G)
    live = list(range(len(items) * G))
    for turn in range(max_turns):
        if not live:
            break
        budget = {b: max_total_tokens - len(eps.ids[b]) for b in live}
        max_new = min(max_turn_tokens, max(budget.values()))
        if turn == 0:  # identical contexts within a group: one shared prefill per item
            r = sample(model, eps.prompts_N, group_size=G, max_new_tokens=max_new, sampling=spec, eos_token_id=eos,
                       pad_token_id=pad, generator=generator)
        else:
            r = sample(model, [eps.prompt(b) + eps.ids[b] for b in live], group_size=1, max_new_tokens=max_new,
                       sampling=spec, eos_token_id=eos, pad_token_id=pad, generator=generator)
        pending = eps.add_turn(r, live, budget, tokenizer, eos, max_total_tokens)
        live = eps.step(pending, tokenizer, max_total_tokens)
    return eps.batch(pad, device)
