"""Multi-turn episodes: token layout and masks, log-prob alignment, budgets, objective invisibility."""

import pytest
import torch

from grpolab import objectives as obj
from grpolab.envs import StepResult, format_observation, make_env
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import Rollout, response_logprobs, run_episodes
from grpolab.tasks import TaskItem, get_task
from grpolab.train.sft import encode_transcript, sft_batch


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.fixture(scope="module")
def model(tok):
    cfg = TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    return build_tiny_model(tok, cfg, seed=0).eval()


class CountingEnv:
    """Answers every action with an observation naming the turn; done after ``turns`` actions."""

    def __init__(self, turns=3, reward=0.5):
        self.turns, self.reward = turns, reward

    def reset(self, item):
        self.n = 0
        return item.prompt

    def step(self, action):
        self.n += 1
        if self.n >= self.turns:
            return StepResult("", reward=self.reward, done=True)
        info = {"invalid": True} if self.n == 1 else {"tool_error": True}
        return StepResult(format_observation(f"obs {self.n}"), reward=0.25, info=info)


ITEMS = [TaskItem(prompt="q: 1+2\n", reference="3"), TaskItem(prompt="task: click\n[1] button ok\n", reference="x")]


def _run(model, tok, env_fn, **kw):
    args = {"group_size": 3, "max_turns": 4, "max_total_tokens": 60, "max_turn_tokens": 5,
                "generator": torch.Generator().manual_seed(0)}
    args.update(kw)
    return run_episodes(model, tok, ITEMS, env_fn, **args)


@pytest.fixture(scope="module")
def counting_episodes(model, tok):
    return _run(model, tok, lambda: CountingEnv(turns=3))


def test_layout_masks_and_rewards(counting_episodes, tok):
    ep = counting_episodes
    r = ep.rollout
    B = len(ITEMS) * 3
    assert r.batch_size == B and r.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert r.response_attention is not None
    # every episode ran 3 model turns: 2 observations in between, none after the last
    assert ep.turns.tolist() == [3] * B
    assert ep.rewards.tolist() == [0.25 + 0.25 + 0.5] * B
    assert ep.invalid_actions.tolist() == [1] * B and ep.tool_errors.tolist() == [1] * B
    assert r.finished.all() and not ep.truncated.any()
    for b in range(B):
        L = int(r.response_attention[b].sum())
        assert r.response_attention[b, :L].all() and not r.response_attention[b, L:].any()
        obs_pos = ((r.response_attention[b] == 1) & (r.response_mask[b] == 0)).nonzero().squeeze(1)
        obs_text = tok.decode(r.response_ids[b, obs_pos].tolist())
        assert obs_text == "\n=obs 1\n" + "\n=obs 2\n"
        # observations: logp exactly 0, mask exactly 0; model tokens: mask 1, logp < 0
        assert (r.sample_logp[b, obs_pos] == 0).all()
        model_pos = r.response_mask[b].bool()
        assert (r.sample_logp[b, model_pos] < 0).all()
        # padding after the episode
        assert (r.response_ids[b, L:] == tok.pad_token_id).all() and (r.response_mask[b, L:] == 0).all()
        # the transcript is model text and observations in order
        assert "\n=obs 1\n" in ep.transcripts[b] and ep.transcripts[b].count("\n=obs") == 2


def test_teacher_forced_logprobs_match_sampler(model, tok):
    ep = _run(model, tok, lambda: CountingEnv(turns=3), temperature=0.7)
    r = ep.rollout
    with torch.no_grad():
        lp = response_logprobs(model, r, temperature=0.7).logp
    m = r.response_mask.bool()
    assert m.sum() > 20
    torch.testing.assert_close(lp[m], r.sample_logp[m], atol=2e-5, rtol=1e-4)
    assert (lp[~m] == 0).all()
    # the observations matter: scoring with observation tokens hidden gives other numbers
    hidden = Rollout(r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask, r.sample_logp,
                     r.group_ids, r.finished)
    with torch.no_grad():
        lp_hidden = response_logprobs(model, hidden, temperature=0.7).logp
    assert (lp_hidden[m] - r.sample_logp[m]).abs().max() > 1e-3
    # micro-batched scoring and the tuple form agree
    with torch.no_grad():
        lp_mb = response_logprobs(model, (r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask,
                                          r.response_attention), temperature=0.7, micro_batch_size=2).logp
    torch.testing.assert_close(lp_mb, lp, atol=1e-5, rtol=1e-5)


def test_budgets_truncate(model, tok):
    never = lambda: CountingEnv(turns=10**9)
    ep = _run(model, tok, never, max_turns=3, max_total_tokens=200)
    assert ep.turns.tolist() == [3] * 6 and ep.truncated.all() and not ep.rollout.finished.any()
    ep = _run(model, tok, never, max_turns=50, max_total_tokens=25, max_turn_tokens=5)
    assert int(ep.rollout.response_attention.sum(-1).max()) <= 25
    assert ep.truncated.all()
    assert ep.rollout.response_ids.shape[1] <= 25


def test_greedy_episodes_equal_within_group(model, tok):
    ep = _run(model, tok, lambda: CountingEnv(turns=3), greedy=True)
    ids = ep.rollout.response_ids
    assert torch.equal(ids[0], ids[1]) and torch.equal(ids[1], ids[2]) and torch.equal(ids[3], ids[5])


def test_same_generator_same_episodes(model, tok, counting_episodes):
    a = counting_episodes
    b = _run(model, tok, lambda: CountingEnv(turns=3))
    assert torch.equal(a.rollout.response_ids, b.rollout.response_ids)
    assert torch.equal(a.rollout.sample_logp, b.rollout.sample_logp)


def _pack(x_BT, mask_BT):
    """Drop the mask-0 columns of each row (observations), left-aligning the model tokens."""
    out = torch.zeros_like(x_BT)
    for b in range(x_BT.shape[0]):
        keep = x_BT[b][mask_BT[b].bool()]
        out[b, : len(keep)] = keep
    return out


@pytest.mark.parametrize("ratio, aggregation", [
    ("token", "token"), ("sequence", "sequence"), ("cumulative", "token"), ("gspo", "balanced"),
    ("token", "constant"),
])
def test_observations_are_invisible_to_the_objective(counting_episodes, ratio, aggregation):
    """Poisoned observation positions change nothing, and the loss equals the loss over the
    model tokens alone (packed, observations removed): positions, ratios and normalisers only
    count model tokens."""
    ep = counting_episodes
    r = ep.rollout
    mask = r.response_mask
    torch.manual_seed(1)
    logp = (r.sample_logp + 0.05 * torch.randn_like(r.sample_logp)) * mask
    old = r.sample_logp
    adv = torch.tensor([1.0, -0.5, 0.3, -1.0, 0.7, 0.2])
    kw = {"group_ids": r.group_ids, "ratio": ratio, "aggregation": aggregation, "clip_low": 0.2, "clip_high": 0.28,
              "max_len": 60}
    if ratio == "cumulative":
        kw.update(clip_low=0.025, clip_high=0.05)
    if ratio == "gspo":
        kw.update(clip_low=3e-4, clip_high=4e-4)
    obs = (r.response_attention == 1) & (mask == 0)
    assert obs.any()
    lp = logp.clone().requires_grad_(True)
    loss, _ = obj.policy_loss(lp, old, adv, mask, **kw)
    (g,) = torch.autograd.grad(loss, lp)
    lp2 = torch.where(obs, torch.full_like(logp, 1e6), logp).requires_grad_(True)
    old2 = torch.where(obs, torch.full_like(old, -1e6), old)
    loss2, _ = obj.policy_loss(lp2, old2, adv, mask, **kw)
    (g2,) = torch.autograd.grad(loss2, lp2)
    torch.testing.assert_close(loss2, loss)
    torch.testing.assert_close(g2[~obs], g[~obs])
    assert (g2[obs] == 0).all()
    packed_mask = _pack(mask, mask)
    loss3, _ = obj.policy_loss(_pack(logp, mask), _pack(old, mask), adv, packed_mask, **kw)
    torch.testing.assert_close(loss3, loss, atol=1e-6, rtol=1e-5)


def test_env_items_play_and_sft_labels(model, tok):
    """Real env + task: episodes run end to end; the SFT batch masks exactly the observations."""
    items = get_task("web").items("train", 3)
    ep = run_episodes(model, tok, items, lambda: make_env("web"), group_size=2, max_turns=3,
                      max_total_tokens=64, max_turn_tokens=12, generator=torch.Generator().manual_seed(0))
    assert ep.rollout.batch_size == 6 and (ep.turns >= 1).all()
    assert (ep.invalid_actions >= 0).all() and set(ep.metrics()) >= {
        "episode/turns", "episode/tool_errors", "episode/invalid_actions", "episode/truncated_frac"}
    item = items[0]
    ids, labels = encode_transcript(tok, item.meta["transcript"])
    eos = tok.eos_token_id
    acts = [t for role, t in item.meta["transcript"] if role == "act"]
    obs = [t for role, t in item.meta["transcript"] if role == "obs"]
    trained = [i for i, l in zip(ids, labels) if l != -100]
    assert trained.count(eos) == len(acts)
    assert tok.decode(trained, skip_special_tokens=True) == "".join(acts)
    assert tok.decode([i for i, l in zip(ids, labels) if l == -100]) == "".join(obs)
    _bid, _att, lab = sft_batch(tok, [item], "cpu")
    P = len(tok(item.prompt)["input_ids"])
    assert (lab[0, :P] == -100).all() and lab[0, P:].tolist()[: len(labels)] == labels


def test_update_micro_batches_count_observation_tokens(counting_episodes, model, monkeypatch):
    """The token budget of a micro-batch covers every token its forward sees, observations included."""
    import copy

    from grpolab.config import load_config
    from grpolab.rollout import Experience
    from grpolab.train import UpdateSpec, policy_update, update
    from grpolab.train.optim import build_optimizer, build_scheduler

    r = counting_episodes.rollout
    seen = {}
    real = policy_update.micro_batches

    def spy(keep, lengths, rows_per_micro, token_budget):
        seen["lengths"] = lengths.clone()
        return real(keep, lengths, rows_per_micro, token_budget)

    monkeypatch.setattr(policy_update, "micro_batches", spy)
    cfg = load_config(overrides={"rollout.prompts_per_step": len(ITEMS), "rollout.group_size": 3,
                                 "trainer.skip_zero_advantage": "false"})
    m = copy.deepcopy(model)
    opt = build_optimizer(m, lr=1e-4, weight_decay=0.0, betas=(0.9, 0.99))
    sched = build_scheduler(opt, warmup_steps=0, total_steps=1, schedule="constant")
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 1.0, -1.0])
    update(m, opt, sched, Experience.from_rollout(r, adv), UpdateSpec.from_config(cfg))
    full = (r.prompt_mask.sum(-1) + r.response_attention.sum(-1)).long()
    model_only = (r.prompt_mask.sum(-1) + r.response_mask.sum(-1)).long()
    # rows come in a shuffled group order: compare as multisets
    assert torch.equal(seen["lengths"].sort().values, full.sort().values)
    assert (full > model_only).all()  # every episode here has observation tokens
