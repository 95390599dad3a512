"""The trainer's step through its public pieces: collect -> learning signal -> update().

Float64 copies of one tiny policy take the same step from the same experience; only the
micro-batching (or the zero-advantage skip) differs, so the parameters must agree to float64
tolerance. The loop (`grpolab.train.loop.train`) runs exactly these calls.
"""

from __future__ import annotations

import copy

import pytest
import torch

from grpolab import objectives as obj
from grpolab.config import load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.rollout import Experience, make_collector
from grpolab.train import TrainState, UpdateSpec, update
from grpolab.train.loop import learning_signal


@pytest.fixture(scope="module")
def policy_and_experience():
    tok = build_tokenizer()
    policy = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=64), seed=0).double().eval()
    items = get_task("arith", max_digits=1, max_terms=3).items("train", 4)
    exp = make_collector(tok, max_new_tokens=10).collect(policy, items, group_size=4,
                                                         generator=torch.Generator().manual_seed(1))
    # rewards with signal in three groups and none in one (its rows have advantage 0)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    return policy, tok, exp.replace(rewards=rewards)


def _step(policy, tok, exp, *overrides):
    cfg = load_config(overrides=["rollout.prompts_per_step=4", "rollout.group_size=4", "optim.lr=1e-2",
                                 "optim.warmup_steps=0", "rollout.max_new_tokens=10", *overrides])
    model = copy.deepcopy(policy)
    state = TrainState.create(cfg, model, tok, torch.Generator().manual_seed(0))
    if state.reference is not None:  # a reference that differs from the policy: the KL term pulls
        with torch.no_grad():
            g = torch.Generator().manual_seed(2)
            for p in state.reference.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    spec = UpdateSpec.from_config(cfg)
    torch.manual_seed(0)  # the mini-batch order
    exp = learning_signal(exp, state, spec, obj.get_advantage_estimator(cfg.objective.advantage))
    grads = []  # the gradient each optimizer step sees (after clipping)
    state.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grads.append([p.grad.detach().clone() for p in model.parameters()]))
    stats = update(state.policy, state.optimizer, state.scheduler, exp, spec)
    stats["grads"] = grads
    return [p.detach().clone() for p in model.parameters()], stats, exp


@pytest.mark.parametrize("extra", [
    [],
    ["objective.aggregation=balanced", "trainer.epochs=2", "trainer.mini_batches=2"],
    ["preset=ctpo", "objective.aggregation=sequence", "objective.kl_coef=0.1"],
])
def test_micro_batch_size_changes_nothing_at_trainer_level(policy_and_experience, extra):
    # the joint forward (trainer.share_prompts=false): the partition changes neither loss nor gradient
    # to float64 rounding; the shared-prompt forward is compared with it in the next test
    policy, tok, exp = policy_and_experience
    runs = {mb: _step(policy, tok, exp, f"trainer.micro_batch_size={mb}", "trainer.share_prompts=false", *extra)[0]
            for mb in (1, 3, 0)}
    for mb in (1, 3):  # 0 = fill up to micro_batch_tokens (1024): the whole batch in one forward
        for a, b in zip(runs[mb], runs[0]):
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    moved = max(float((a - p.detach()).abs().max()) for a, p in zip(runs[0], policy.parameters()))
    assert moved > 1e-4  # the step really changed the policy


@pytest.mark.parametrize("extra", [[], ["trainer.micro_batch_size=3"], ["objective.kl_coef=0.1"]])
def test_shared_prompt_forward_takes_the_same_step(policy_and_experience, extra):
    # trainer.share_prompts (the default) forwards each distinct prompt of a micro-batch once. The
    # step equals the joint forward's to float32 rounding, not float64: Hugging Face's RMSNorm
    # computes in float32 even in a float64 model, so its backward rounds each position's gradient
    # to float32, and the shared prompt position receives the sum of G rows' gradients before that
    # rounding instead of G separately rounded ones (per row the two paths agree to 1e-15).
    # Compared: the gradient of every optimizer step (parameters after AdamW would amplify float32
    # rounding of near-zero gradients by up to lr / eps).
    policy, tok, exp = policy_and_experience
    _, s_joint, _ = _step(policy, tok, exp, "trainer.share_prompts=false", *extra)
    _, s_shared, _ = _step(policy, tok, exp, "trainer.share_prompts=true", *extra)
    assert len(s_joint["grads"]) == len(s_shared["grads"]) == 1
    for a, b in zip(s_shared["grads"][0], s_joint["grads"][0]):
        assert b.abs().max() > 0
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6 * float(b.abs().max()))
    assert s_shared["loss"] == pytest.approx(s_joint["loss"], rel=1e-9, abs=1e-12)
    assert s_shared["grad_norm"] == pytest.approx(s_joint["grad_norm"], rel=1e-6)


def test_kl_term_turns_zero_advantage_skipping_off(policy_and_experience):
    policy, tok, exp = policy_and_experience
    _, stats0, exp0 = _step(policy, tok, exp, "objective.kl_coef=0")
    assert stats0["skipped_rows_frac"] == pytest.approx(4 / 16)  # the all-equal group is skipped
    assert (exp0.advantages[4:8] == 0).all()
    with_kl, stats, _ = _step(policy, tok, exp, "objective.kl_coef=0.1", "trainer.skip_zero_advantage=true")
    assert stats["skipped_rows_frac"] == 0.0
    # the zero-advantage rows still pull towards the reference: the same step as with skipping off
    no_skip, _, _ = _step(policy, tok, exp, "objective.kl_coef=0.1", "trainer.skip_zero_advantage=false")
    for a, b in zip(with_kl, no_skip):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_update_needs_advantages(policy_and_experience):
    policy, tok, exp = policy_and_experience
    cfg = load_config()
    state = TrainState.create(cfg, copy.deepcopy(policy), tok, torch.Generator())
    with pytest.raises(ValueError, match="advantages"):
        update(state.policy, state.optimizer, state.scheduler, exp, UpdateSpec.from_config(cfg))


def test_experience_joins_rows_to_items_by_index(policy_and_experience):
    _, _, exp = policy_and_experience
    assert exp.batch_size == 16 and len(exp.items) == 4
    assert [it.prompt for it in exp.row_items] == [it.prompt for it in exp.items for _ in range(4)]
    assert [r.tolist() for r in exp.group_rows()] == [[4 * g + j for j in range(4)] for g in range(4)]
    with pytest.raises(ValueError, match="texts"):
        Experience(items=exp.items, rollout=exp.rollout, texts=exp.texts[:3], rewards=exp.rewards)


def test_drift_of_the_cumulative_log_ratio_is_logged_by_position(policy_and_experience):
    policy, tok, exp = policy_and_experience
    key = "cum_log_ratio_rms_by_pos/1-16"
    # one optimizer step on fresh experience: the behaviour policy is the current one, no drift
    _, on, _ = _step(policy, tok, exp)
    assert on[key] == 0.0
    # four optimizer steps per batch: the later mini-batches see a policy that has moved
    # (the shared-prompt forward is exact only to float32 rounding: off, to compare partitions)
    off = {mb: _step(policy, tok, exp, "trainer.epochs=2", "trainer.mini_batches=2", "trainer.share_prompts=false",
                     f"trainer.micro_batch_size={mb}")[1] for mb in (1, 0)}
    assert off[0][key] > 1e-4
    # token-weighted over micro-batches: the partition does not change it
    assert off[1][key] == pytest.approx(off[0][key], rel=1e-6)  # float64, parameters agree to ~1e-9
    # responses of <= 10 tokens have no position > 100
    assert f"cum_log_ratio_rms_pos_gt{obj.LATE_POSITION}" not in off[0]


def test_the_loss_settings_have_one_source():
    """LossSpec hands on the objective section's LOSS_KEYS: exactly policy_loss's hyperparameters,
    with policy_loss's own defaults, and a config's values reach policy_loss unchanged."""
    import inspect

    from grpolab.config import ObjectiveConfig
    from grpolab.train.policy_update import LossSpec

    params = inspect.signature(obj.policy_loss).parameters
    hyper = {k for k, p in params.items() if p.kind is p.KEYWORD_ONLY} - {"group_ids", "max_len", "ref_logp",
                                                                          "weights"}
    assert set(ObjectiveConfig.LOSS_KEYS) == hyper
    assert ObjectiveConfig().loss_kwargs() == {k: params[k].default for k in ObjectiveConfig.LOSS_KEYS}
    cfg = load_config(overrides=["objective.ratio=cumulative", "objective.clip_low=0.025", "objective.clip_high=0.05",
                                 "objective.kl_coef=0.1", "rollout.max_new_tokens=40"])
    spec = LossSpec.from_config(cfg)
    assert spec.kwargs() == {**cfg.objective.loss_kwargs(), "max_len": 40}
    assert spec.kwargs()["ratio"] == "cumulative" and spec.kwargs()["kl_coef"] == 0.1
    cfg.objective.clip_low = 0.5                              # the spec holds its own copy
    assert spec.kwargs()["clip_low"] == 0.025


@pytest.mark.parametrize("mini_batches", [1, 2])
def test_the_mini_batch_order_comes_from_the_training_generator_only(policy_and_experience, mini_batches):
    """The group order is drawn from the generator the trainer passes (never torch's global stream,
    which evaluation draws from); with one mini-batch nothing is drawn, so the sampling stream that
    follows is the one it was."""
    policy, tok, exp = policy_and_experience
    cfg = load_config(overrides=["rollout.prompts_per_step=4", "rollout.group_size=4", "optim.lr=1e-2",
                                 "optim.warmup_steps=0", "rollout.max_new_tokens=10",
                                 f"trainer.mini_batches={mini_batches}"])
    spec = UpdateSpec.from_config(cfg)
    runs = []
    for global_seed in (0, 123):  # a different global stream must change nothing
        model = copy.deepcopy(policy)
        state = TrainState.create(cfg, model, tok, torch.Generator().manual_seed(0))
        e = learning_signal(exp, state, spec, obj.get_advantage_estimator(cfg.objective.advantage))
        gen = torch.Generator().manual_seed(5)
        torch.manual_seed(global_seed)
        update(state.policy, state.optimizer, state.scheduler, e, spec, generator=gen)
        runs.append(([p.detach().clone() for p in model.parameters()], gen.get_state()))
    for a, b in zip(runs[0][0], runs[1][0]):
        assert torch.equal(a, b)
    drew = not torch.equal(runs[0][1], torch.Generator().manual_seed(5).get_state())
    assert drew == (mini_batches > 1)
