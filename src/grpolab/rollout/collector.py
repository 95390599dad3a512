"""Collectors: a model and task items in, a scored :class:`Experience` out.

One interface, two implementations:

- :class:`SingleTurnCollector`: one completion per row (:func:`grpolab.rollout.sample`), decoded
  and scored by the item's verifier through the parallel scorer
  (:func:`grpolab.rewards.score_batch`; a verifier that fails scores 0 and is counted);
- :class:`EpisodeCollector`: multi-turn episodes against an environment
  (:func:`grpolab.rollout.run_episodes`); the environment scores each episode.

Training, evaluation, the preflight and the warm start's checks all collect through
:func:`make_collector`, so rewards are scored in one place.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from grpolab.rollout.experience import Experience

__all__ = ["Collector", "EpisodeCollector", "SingleTurnCollector", "make_collector"]


class Collector(Protocol):
    """Samples ``group_size`` responses (or episodes) per item and scores them."""

    def collect(self, model, items: list, *, group_size: int, greedy: bool = False, temperature: float = 1.0,
                top_p: float = 1.0, generator: torch.Generator | None = None, top_k: int = 0,
                min_p: float = 0.0, repetition_penalty: float = 1.0) -> Experience:
        """``len(items) * group_size`` rows, group-contiguous, with texts and rewards."""
        ...


class SingleTurnCollector:
    """One sampled completion per row, scored by the item's verifier.

    Args:
        tokenizer: the policy's tokenizer.
        max_new_tokens: the longest completion.
        reward_workers: verifier processes (1 = score in this process; see ``score_batch``).
        prompt_format: the run's resolved :class:`grpolab.tasks.PromptFormat` (chat template,
            system prompt, prompt template); None: ``item.prompt`` as plain text with the
            tokenizer's special tokens and BOS.
        stop_ids: the ids that end a response (:func:`grpolab.models.stop_token_ids`: the
            tokenizer's EOS and ``generation_config``'s list); None: the tokenizer's EOS.
    """

    def __init__(self, tokenizer, *, max_new_tokens: int, reward_workers: int = 1, prompt_format=None,
                 stop_ids=None) -> None:
        from grpolab.tasks import PromptFormat

        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.reward_workers = reward_workers
        self.prompt_format = prompt_format if prompt_format is not None else PromptFormat(chat_template="off")
        self.stop_ids = stop_ids if stop_ids is not None else tokenizer.eos_token_id

    def prompt_texts(self, items) -> list[str]:
        """The prompt text of each item as the model sees it (template included)."""
        return [self.prompt_format.render(it, self.tokenizer) for it in items]

    def collect(self, model, items, *, group_size, greedy=False, temperature=1.0, top_p=1.0, generator=None,
                top_k=0, min_p=0.0, repetition_penalty=1.0):
        from grpolab.rewards import score_batch
        from grpolab.rollout.sampler import SamplingSpec, sample
        from grpolab.rollout.text import decode_responses

        tok = self.tokenizer
        spec = SamplingSpec(temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
                            repetition_penalty=repetition_penalty, greedy=greedy)
        t0 = time.time()
        rollout = sample(model, self.prompt_format.encode(items, tok), group_size=group_size,
                         max_new_tokens=self.max_new_tokens, sampling=spec, eos_token_id=self.stop_ids,
                         pad_token_id=tok.pad_token_id, generator=generator)
        t1 = time.time()
        texts = decode_responses(tok, rollout.response_ids, rollout.response_mask)
        row_items = [items[i] for i in rollout.group_ids.tolist()]
        results = score_batch(list(zip(row_items, texts)), workers=self.reward_workers)
        rewards = torch.tensor([r.score for r in results], dtype=torch.float32)
        failed = next((i for i, r in enumerate(results) if "error" in r.info), None)
        example = None if failed is None else {  # the cause a warning shows (grpolab.train.watch)
            "error": str(results[failed].info["error"]), "reward": str(results[failed].info.get("reward", "")),
            "completion": texts[failed], "reference": getattr(row_items[failed], "reference", None)}
        return Experience(items=list(items), rollout=rollout, texts=texts, rewards=rewards,
                          reward_errors=sum("error" in r.info for r in results), reward_error_example=example,
                          seconds={"rollout": t1 - t0, "reward": time.time() - t1})


class EpisodeCollector:
    """Multi-turn episodes in the environment ``env`` (an :class:`grpolab.config.EnvConfig`)."""

    def __init__(self, tokenizer, env) -> None:
        if not env.name:
            raise ValueError("EpisodeCollector needs an environment (env.name is empty)")
        self.tokenizer = tokenizer
        self.env = env

    def prompt_texts(self, items) -> list[str]:
        return [it.prompt for it in items]

    def collect(self, model, items, *, group_size, greedy=False, temperature=1.0, top_p=1.0, generator=None,
                top_k=0, min_p=0.0, repetition_penalty=1.0):
        if top_k or min_p or repetition_penalty != 1.0:
            raise ValueError("top_k / min_p / repetition_penalty are not supported for multi-turn episodes")
        from grpolab.envs import make_env
        from grpolab.rollout.episodes import run_episodes

        env = self.env
        t0 = time.time()
        episodes = run_episodes(
            model, self.tokenizer, items, lambda: make_env(env.name, **env.options), group_size=group_size,
            max_turns=env.max_turns, max_total_tokens=env.max_total_tokens,
            max_turn_tokens=env.max_turn_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
            generator=generator,
        )
        return Experience(items=list(items), rollout=episodes.rollout, texts=list(episodes.transcripts),
                          rewards=episodes.rewards.float().cpu(), episode_metrics=episodes.metrics(),
                          seconds={"rollout": time.time() - t0, "reward": 0.0})


def make_collector(tokenizer, *, max_new_tokens: int, env=None, reward_workers: int = 1, prompt_format=None,
                   stop_ids=None) -> Collector:
    """The collector for a run: episodes when ``env`` names an environment, else single completions."""
    if env is not None and env.name:
        return EpisodeCollector(tokenizer, env)
    return SingleTurnCollector(tokenizer, max_new_tokens=max_new_tokens, reward_workers=reward_workers,
                               prompt_format=prompt_format, stop_ids=stop_ids)


def collector_for(cfg, tokenizer, *, prompt_format=None, stop_ids=None) -> Collector:
    """:func:`make_collector` with a run config's settings (and its resolved prompt format / stop ids)."""
    return make_collector(tokenizer, max_new_tokens=cfg.rollout.max_new_tokens, env=cfg.env,
                          reward_workers=cfg.rollout.reward_workers, prompt_format=prompt_format,
                          stop_ids=stop_ids)
