"""Rows of an episode batch line up: reward, actions, observations and advantages of row ``b``
all belong to the episode the environment ``b`` played, when episodes differ in length and reward.

A fake environment whose reward, observation and end depend on the action text, and a random
tiny model sampling at high temperature (so the episodes of a group differ), are played through
:func:`grpolab.rollout.run_episodes`. For every row: the model segments of ``response_ids``
(``response_mask`` 1) decode to exactly the actions that row's environment received, the
observation segments to exactly what it answered, and replaying the actions in a fresh
environment gives the row's reward and done flag. GRPO advantages computed from the rewards are
then positive exactly on the rows whose replayed return beats their group's mean.
"""

import pytest
import torch

from grpolab import objectives as obj
from grpolab.envs import StepResult, format_observation
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import run_episodes
from grpolab.tasks import TaskItem


class TextEnv:
    """Reward and length depend on the actions: done when an action has 3..5 characters
    (reward 1.0 if that length is even), else an observation naming the length."""

    def reset(self, item):
        self.prompt, self.actions, self.observations = item.prompt, [], []
        return item.prompt

    def step(self, action):
        self.actions.append(action)
        n = len(action)
        if 3 <= n <= 5:
            return StepResult("", reward=float(n % 2 == 0), done=True)
        obs = format_observation(f"len {n}")
        self.observations.append(obs)
        return StepResult(obs, reward=0.0, info={"invalid": n == 0})


ITEMS = [TaskItem(prompt=p, reference="") for p in ("a: 1\n", "task: b\n[1] x\n", "c\n")]


@pytest.fixture(scope="module")
def played():
    tok = build_tokenizer()
    cfg = TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = build_tiny_model(tok, cfg, seed=3).eval()
    envs = []

    def make_env():
        envs.append(TextEnv())
        return envs[-1]

    ep = run_episodes(model, tok, ITEMS, make_env, group_size=6, max_turns=4, max_total_tokens=48,
                      max_turn_tokens=8, temperature=3.0, generator=torch.Generator().manual_seed(0))
    return tok, ep, envs


def _segments(ids, mask):
    """Runs of equal mask value: [(mask, [ids])...]."""
    out = []
    for t, m in zip(ids, mask):
        if out and out[-1][0] == m:
            out[-1][1].append(t)
        else:
            out.append((m, [t]))
    return out


def test_rows_replay_to_their_rewards(played):
    tok, ep, envs = played
    r = ep.rollout
    G = 6
    assert len(envs) == r.batch_size == len(ITEMS) * G
    # the episodes differ (else alignment would be untestable): several lengths and both rewards
    assert len(set(ep.turns.tolist())) > 1 and 0 < float(ep.rewards.sum()) < r.batch_size
    for b in range(r.batch_size):
        env = envs[b]
        assert env.prompt == ITEMS[b // G].prompt and int(r.group_ids[b]) == b // G
        L = int(r.response_attention[b].sum())
        segs = _segments(r.response_ids[b, :L].tolist(), r.response_mask[b, :L].long().tolist())
        acts = [s for m, s in segs if m == 1]
        obs = [tok.decode(s) for m, s in segs if m == 0]
        assert len(acts) == int(ep.turns[b])
        # each model segment is one turn: EOS only at its end
        for s in acts[:-1]:
            assert s[-1] == tok.eos_token_id or len(s) == 8
        decoded = [tok.decode(s[:-1] if s[-1] == tok.eos_token_id else s, skip_special_tokens=True) for s in acts]
        # the environment of row b received exactly row b's actions and answered its observations
        # (a turn cut by the token budget mid-turn is not sent: the episode is truncated there)
        assert env.actions == decoded[: len(env.actions)] and len(env.actions) >= len(decoded) - 1
        assert obs == env.observations[: len(obs)]
        # replaying the actions gives the row's reward and done flag
        fresh = TextEnv()
        fresh.reset(ITEMS[b // G])
        ret, done = 0.0, False
        for a in env.actions:
            res = fresh.step(a)
            ret += res.reward
            done = res.done
        assert ret == float(ep.rewards[b]) and done == bool(r.finished[b]) == (not bool(ep.truncated[b]))


def test_advantages_follow_the_replayed_returns(played):
    tok, ep, envs = played
    G = 6
    adv = obj.get_advantage_estimator("grpo")(ep.rewards, ep.rollout.group_ids)
    for n in range(len(ITEMS)):
        rows = range(n * G, n * G + G)
        returns = []
        for b in rows:
            fresh = TextEnv()
            fresh.reset(ITEMS[n])
            returns.append(sum(fresh.step(a).reward for a in envs[b].actions))
        mean = sum(returns) / G
        for b, ret in zip(rows, returns):
            if ret > mean:
                assert adv[b] > 0
            elif ret < mean:
                assert adv[b] < 0
            else:
                assert adv[b] == 0
