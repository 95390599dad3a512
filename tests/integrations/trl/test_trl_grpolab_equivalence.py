"""grpolab's own token-level objective equals TRL's ``loss_type="dapo"`` on one fixed batch.

This guards the equal-work comparison of ``benchmarks/speed/vs_trl.py`` across TRL versions: on the same
model, prompts, completions and rewards, TRL's ``GRPOTrainer._compute_loss`` (plain TRL, not the
grpolab adapter) and the pieces grpolab's trainer runs -- the ``grpo`` advantage estimator,
``response_logprobs`` (with the update's shared-prompt forward and with the joint one),
``aggregation_weights(mode="token")`` and ``policy_loss`` -- give the same loss and gradient. The one known difference is the epsilon added to the group std: TRL divides by
``std + 1e-4``, grpolab by ``std + 1e-6``, so grpolab's advantages are larger by the factor
``(std + 1e-4) / (std + 1e-6)`` and the loss and gradient by at most that factor (the surrogate is
linear in the advantage on either side of the clip, and the sign of each advantage is the same).
The tolerance below is derived from it; with TRL's advantages fed to grpolab's loss, they agree to
float rounding.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("trl", reason="trl is in the test extra: pip install -e '.[test]'")
from datasets import Dataset  # noqa: E402

from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer  # noqa: E402
from grpolab.objectives import aggregation_weights, get_advantage_estimator, policy_loss  # noqa: E402
from grpolab.rollout.logprobs import response_logprobs  # noqa: E402

SMALL = TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
G = 4
TRL_STD_EPS, GRPOLAB_STD_EPS = 1e-4, 1e-6


def _trl_trainer(tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    kw = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, gradient_accumulation_steps=1,
        num_generations=G, max_completion_length=8, max_steps=1, learning_rate=1e-5, beta=0.0,
        loss_type="dapo", epsilon=0.2, epsilon_high=0.28, scale_rewards="group", report_to="none",
        save_strategy="no", disable_tqdm=True, use_cpu=True, bf16=False, fp16=False, seed=0,
        dataloader_num_workers=0,
    )
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    kw["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
    tok = build_tokenizer()
    model = build_tiny_model(tok, SMALL, seed=0)
    ds = Dataset.from_dict({"prompt": ["12+34="] * 8})
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=lambda completions, **k: [0.0] * len(completions),
                          args=GRPOConfig(**kw), train_dataset=ds)
    trainer.current_gradient_accumulation_steps = 1  # set by train() otherwise
    assert trainer.args.steps_per_generation == 1
    return trainer


def _trl_advantages(rewards_B: torch.Tensor) -> torch.Tensor:
    """TRL's group advantages (``GRPOTrainer._generate_and_score_completions``, scale_rewards="group"):
    ``(r - mean_g) / (nanstd_g + 1e-4)``, with TRL's own ``nanstd``."""
    from trl.trainer.utils import nanstd

    grouped = rewards_B.view(-1, G)
    mean = grouped.mean(dim=1).repeat_interleave(G)
    std = nanstd(grouped, dim=1).repeat_interleave(G)
    return (rewards_B - mean) / (std + TRL_STD_EPS)


def _batch(tok, off_policy: bool, seed: int = 0):
    """8 completions of one prompt length (TRL's forward takes no position ids), ragged lengths, two
    groups with different reward spreads."""
    g = torch.Generator().manual_seed(seed)
    B, T = 8, 7
    prompt = tok(["12+34="] * B, add_special_tokens=True, return_tensors="pt")
    completion_ids = torch.randint(5, len(tok), (B, T), generator=g)
    lengths = torch.tensor([7, 3, 5, 1, 6, 7, 2, 4])
    mask = (torch.arange(T) < lengths[:, None]).long()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.9, 0.1, 0.6])  # group stds 0.577 and 0.365
    return prompt["input_ids"], prompt["attention_mask"], completion_ids, mask, rewards, g


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("share_prompts", [True, False], ids=["shared-prompt-forward", "joint-forward"])
@pytest.mark.parametrize("off_policy", [False, True], ids=["on-policy", "off-policy-clipped"])
def test_grpolab_token_loss_and_gradient_equal_trl_dapo(tmp_path, off_policy, share_prompts):
    from trl import GRPOTrainer

    trainer = _trl_trainer(tmp_path)
    model, tok = trainer.model, trainer.processing_class
    model.train()
    prompt_ids, prompt_mask, completion_ids, mask, rewards, g = _batch(tok, off_policy)
    gids = torch.arange(8) // G
    lp_args = (prompt_ids, prompt_mask, completion_ids, mask)
    old = None
    if off_policy:  # behaviour log-probs away from the current ones: the clip binds on some tokens
        with torch.no_grad():
            old = response_logprobs(model, lp_args).logp + 0.4 * torch.randn(mask.shape, generator=g)
    adv_trl = _trl_advantages(rewards)

    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": mask, "advantages": adv_trl, "num_items_in_batch": mask.sum()}
    if old is not None:
        inputs["old_per_token_logps"] = old
    model.zero_grad()
    loss_trl = GRPOTrainer._compute_loss(trainer, model, inputs)
    loss_trl.backward()
    g_trl = _grads(model)
    if off_policy:
        assert trainer._metrics["train"]["clip_ratio/region_mean"][-1] > 0  # clipped tokens are covered

    def grpolab_loss(adv):
        model.zero_grad()
        # the update's forward: trainer.share_prompts (default) forwards the one prompt once
        logp = response_logprobs(model, lp_args, share_prompts=share_prompts).logp
        W = aggregation_weights(mask.float(), "token", advantages=adv, group_ids=gids)
        loss, _ = policy_loss(logp, logp.detach() if old is None else old, adv, mask.float(), group_ids=gids,
                              ratio="token", clip_low=0.2, clip_high=0.28, dual_clip=None, weights=W)
        loss.backward()
        return loss.detach(), _grads(model)

    # 1. the same advantages: the objectives agree to float rounding
    loss_same, g_same = grpolab_loss(adv_trl)
    torch.testing.assert_close(loss_same, loss_trl.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(g_same, g_trl, rtol=1e-4, atol=1e-7)
    assert g_trl.norm() > 1e-3  # a real gradient, not two zeros

    # 2. each side's own advantages: they differ only through the std epsilon
    adv_ours = get_advantage_estimator("grpo")(rewards, gids)
    std = torch.stack([rewards[gids == k].std() for k in range(2)])
    bound = float(((TRL_STD_EPS - GRPOLAB_STD_EPS) / (std + GRPOLAB_STD_EPS)).max())  # relative, ~2.7e-4
    torch.testing.assert_close(adv_ours, adv_trl, rtol=1.01 * bound, atol=0)
    assert not torch.equal(adv_ours, adv_trl)  # the epsilons do differ
    loss_ours, g_ours = grpolab_loss(adv_ours)
    rel_loss = float((loss_ours - loss_trl.detach()).abs() / loss_trl.detach().abs())
    assert rel_loss <= 1.01 * bound + 1e-5
    rel_grad = float((g_ours - g_trl).norm() / g_trl.norm())
    assert rel_grad <= 1.01 * bound + 1e-4
    cos = float(torch.nn.functional.cosine_similarity(g_ours, g_trl, dim=0))
    assert cos > 1 - 1e-6
