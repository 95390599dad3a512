"""Contract tests: grpolab's losses through verl's own registry and aggregation (CPU, no Ray).

Expected values come from verl's code (``agg_loss``, the ``vanilla`` / ``gspo`` losses) or from
grpolab's ``policy_loss`` on the full batch, never from the adapter under test; BA's folded
advantages are also checked against a hand-computed case.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

if os.environ.get("GRPOLAB_REQUIRE_VERL"):  # the CI's verl environment: a missing verl is a failure
    import verl.trainer.ppo.core_algos as core_algos  # noqa: F401
else:
    pytest.importorskip("verl", reason="verl runs in its own environment: pip install -e '.[test,verl]'")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402

from grpolab.integrations.verl import losses as gv  # noqa: E402
from grpolab.objectives import aggregation_weights, group_advantages, policy_loss, rlsd_advantages  # noqa: E402

gv.register()
TOL = dict(rtol=1e-10, atol=1e-12)
MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean")


def _batch(B=8, T=12, G=4, seed=0, spread=0.05):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[1] = T
    mask = torch.arange(T) < lengths[:, None]
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = old + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 2, (B,), generator=g).double()
    gids = torch.arange(B) // G
    adv_B = group_advantages(rewards, gids)
    adv = adv_B[:, None] * mask  # verl hands token-level, masked advantages to the loss
    return logp, old, adv, mask, adv_B, gids, rewards


def _config(**info):
    cfg = ActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=2,
                      clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0)
    cfg.global_batch_info.update(info)
    return cfg


def test_register_is_idempotent_and_names_exist():
    first = {n: core_algos.get_policy_loss_fn(n) for n in gv.POLICY_LOSSES}
    assert gv.register() == [*gv.POLICY_LOSSES, gv.BALANCED_ESTIMATOR]
    for n, fn in first.items():
        assert core_algos.get_policy_loss_fn(n) is fn
    assert core_algos.get_adv_estimator_fn("grpolab_balanced") is not None


@pytest.mark.parametrize("mode", MODES)
def test_grpolab_token_loss_equals_verl_vanilla(mode):
    """Same tensors through verl's own 'vanilla' loss and grpolab's: same loss, same gradient."""
    logp, old, adv, mask, *_ = _batch(spread=0.8)  # large enough that clipping and dual clip bind
    cfg = _config()
    lp = logp.clone().requires_grad_()
    ref_loss, _ = core_algos.get_policy_loss_fn("vanilla")(old, lp, adv, mask, mode, cfg)
    ref_loss.backward()
    ref_grad = lp.grad
    lp2 = logp.clone().requires_grad_()
    loss, metrics = core_algos.get_policy_loss_fn("grpolab")(old, lp2, adv, mask, mode, cfg)
    loss.backward()
    torch.testing.assert_close(loss, ref_loss.detach(), **TOL)
    torch.testing.assert_close(lp2.grad, ref_grad, **TOL)
    assert metrics["actor/pg_clipfrac"] > 0 and metrics["actor/pg_clipfrac_lower"] > 0  # clip and dual clip bind
    assert set(metrics) >= {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    assert all(isinstance(v, float) for v in metrics.values())


def test_grpolab_gspo_equals_verl_gspo():
    logp, old, adv, mask, *_ = _batch(spread=0.1)
    adv = adv.clamp_min(0)  # verl's gspo has no dual clip; compare where it cannot bind
    cfg = _config()
    lp = logp.clone().requires_grad_()
    ref, _ = core_algos.get_policy_loss_fn("gspo")(old, lp, adv, mask, "seq-mean-token-mean", cfg)
    ref.backward()
    lp2 = logp.clone().requires_grad_()
    loss, _ = core_algos.get_policy_loss_fn("grpolab_gspo")(old, lp2, adv, mask, "seq-mean-token-mean", cfg)
    loss.backward()
    torch.testing.assert_close(loss, ref.detach(), **TOL)
    torch.testing.assert_close(lp2.grad, lp.grad, **TOL)


@pytest.mark.parametrize("name,ratio,hp", [
    ("ctpo", "cumulative", dict(clip_low=0.025, clip_high=0.05, clip_power=0.5, dual_clip=None)),
    ("grpolab_cumulative", "cumulative", dict(clip_low=0.2, clip_high=0.28, clip_power=0.5, dual_clip=3.0)),
    ("grpolab_sequence", "sequence", dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0)),
    ("grpolab", "token", dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0)),
])
@pytest.mark.parametrize("mode,aggregation", [("token-mean", "token"), ("seq-mean-token-mean", "sequence")])
def test_registry_call_equals_grpolab_policy_loss(name, ratio, hp, mode, aggregation):
    logp, old, adv, mask, adv_B, *_ = _batch(spread=0.1)
    lp = logp.clone().requires_grad_()
    loss, _ = core_algos.get_policy_loss_fn(name)(old, lp, adv, mask, mode, _config())
    loss.backward()
    lp_ref = logp.clone().requires_grad_()
    ref, _ = policy_loss(lp_ref, old, adv_B, mask.double(), ratio=ratio, aggregation=aggregation, **hp)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), **TOL)
    torch.testing.assert_close(lp.grad, lp_ref.grad, **TOL)


@pytest.mark.parametrize("mode,aggregation,extra", [
    ("token-mean", "token", {}),
    ("seq-mean-token-mean", "sequence", {}),
    ("seq-mean-token-sum-norm", "constant", {"max_len": 16}),
])
def test_verl_agg_loss_agrees_with_aggregation_weights(mode, aggregation, extra):
    _, _, _, mask, *_ = _batch(B=9, T=10)
    mask[4] = False  # an empty response: excluded from every count on both sides
    g = torch.Generator().manual_seed(3)
    loss_mat = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    info = {"loss_scale_factor": extra["max_len"]} if "max_len" in extra else {}
    ref = core_algos.agg_loss(loss_mat, mask.double(), mode, **info)
    W = aggregation_weights(mask.double(), aggregation, **extra)
    # with a float64 mask verl's seq-mean-token-mean divides by (|o| + 1e-8): relative <= 1e-8
    tol = TOL if mode != "seq-mean-token-mean" else dict(rtol=2e-8, atol=1e-12)
    torch.testing.assert_close((W * loss_mat).sum(), ref, **tol)
    # and the adapter's weights reproduce agg_loss for every mode verl has (bool mask, as verl's
    # ppo_loss passes it)
    for m in MODES:
        Wv = gv.verl_aggregation_weights(mask, m, loss_scale_factor=info.get("loss_scale_factor"),
                                         dtype=torch.float64)
        torch.testing.assert_close((Wv * loss_mat).sum(), core_algos.agg_loss(loss_mat, mask, m, **info), **TOL)


@pytest.mark.parametrize("name", ["grpolab", "grpolab_sequence", "grpolab_gspo", "grpolab_cumulative", "ctpo"])
@pytest.mark.parametrize("mode", MODES)
def test_micro_batches_and_dp_ranks_reproduce_full_batch(name, mode):
    """2 data-parallel ranks x 2 micro-batches with verl's global normalisers == the whole batch."""
    logp, old, adv, mask, *_ = _batch(B=8, T=12, spread=0.2)
    fn = core_algos.get_policy_loss_fn(name)
    lp_full = logp.clone().requires_grad_()
    full, _ = fn(old, lp_full, adv, mask, mode, _config(loss_scale_factor=16))
    full.backward()
    dp = 2
    info = dict(dp_size=dp, batch_num_tokens=int(mask.sum()), global_batch_size=8, loss_scale_factor=16)
    lp = logp.clone().requires_grad_()
    total = 0.0
    for rank in range(dp):
        rows = torch.arange(rank * 4, rank * 4 + 4)
        for micro in (rows[:2], rows[2:]):
            part, _ = fn(old[micro], lp[micro], adv[micro], mask[micro], mode, _config(**info))
            (part / dp).backward()  # DDP averages gradients over ranks
            total = total + part.detach() / dp
    torch.testing.assert_close(total, full.detach(), **TOL)
    torch.testing.assert_close(lp.grad, lp_full.grad, **TOL)


def test_dp_without_global_info_is_refused():
    logp, old, adv, mask, *_ = _batch()
    with pytest.raises(ValueError, match="batch_num_tokens"):
        core_algos.get_policy_loss_fn("grpolab")(old, logp, adv, mask, "token-mean", _config(dp_size=2))
    with pytest.raises(ValueError, match="loss_agg_mode"):
        gv.verl_aggregation_weights(mask, "token-average")


def test_balanced_estimator_hand_computed():
    # one group of 3, rewards [1, 0, 0], lengths [2, 4, 2]; GRPO: mean 1/3, unbiased std sqrt(1/3)
    # A = [ (2/3)/0.57735, -(1/3)/0.57735, -(1/3)/0.57735 ] = [1.1547, -0.57735, -0.57735]
    # BA: S+ = {0}: 2 tokens, w = (1/3)/2 = 1/6; S- = {1, 2}: 6 tokens, w = (2/3)/6 = 1/9
    # folded (x B = 3): row 0: 1.1547 * 1/6 * 3 = 0.57735; rows 1, 2: -0.57735 * 1/9 * 3 = -0.19245
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    rewards = torch.zeros(3, 4, dtype=torch.float64)
    rewards[0, 1] = 1.0  # verl puts the score on the last response token
    fn = core_algos.get_adv_estimator_fn("grpolab_balanced")
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=np.array(["q", "q", "q"], dtype=object),
                  config=AlgoConfig())
    expected = torch.tensor([[0.57735, 0.57735, 0, 0], [-0.19245] * 4, [-0.19245, -0.19245, 0, 0]],
                            dtype=torch.float64)
    torch.testing.assert_close(adv, expected, rtol=0, atol=2e-5)
    assert torch.equal(adv, ret)


@pytest.mark.parametrize("name,ratio,hp", [
    ("grpolab", "token", dict(clip_low=0.2, clip_high=0.28, dual_clip=3.0)),
    ("ctpo", "cumulative", dict(clip_low=0.025, clip_high=0.05, clip_power=0.5, dual_clip=None)),
])
def test_balanced_through_verl_equals_grpolab_balanced(name, ratio, hp):
    """Estimator -> verl loss with seq-mean-token-sum, 2 ranks x 2 micro-batches == grpolab BA."""
    B, T, G = 12, 10, 4
    logp, old, _, mask, _, gids, rewards = _batch(B=B, T=T, G=G, seed=5, spread=0.2)
    mask[7] = False  # an empty response
    tlr = torch.zeros(B, T, dtype=torch.float64)
    tlr[:, 0] = rewards
    uids = np.array([f"prompt-{int(g)}" for g in gids], dtype=object)
    est = core_algos.get_adv_estimator_fn("grpolab_balanced")
    adv, _ = est(token_level_rewards=tlr, response_mask=mask, index=uids, config=AlgoConfig())
    adv_B = group_advantages(rewards, gids)
    # the BA weights the verl path carries equal grpolab's (where the advantage is non-zero)
    W_ba = aggregation_weights(mask.double(), "balanced", advantages=adv_B, group_ids=gids)
    nz = adv_B != 0
    torch.testing.assert_close((adv / (adv_B[:, None] * B))[nz], W_ba[nz], **TOL)

    fn = core_algos.get_policy_loss_fn(name)
    dp = 2
    info = dict(dp_size=dp, batch_num_tokens=int(mask.sum()), global_batch_size=B)
    lp = logp.clone().requires_grad_()
    total = 0.0
    for rank in range(dp):
        rows = torch.arange(rank * B // dp, (rank + 1) * B // dp)
        for micro in (rows[:3], rows[3:]):
            part, _ = fn(old[micro], lp[micro], adv[micro], mask[micro], gv.BALANCED_LOSS_AGG_MODE, _config(**info))
            (part / dp).backward()
            total = total + part.detach() / dp
    lp_ref = logp.clone().requires_grad_()
    ref, _ = policy_loss(lp_ref, old, adv_B, mask.double(), group_ids=gids, ratio=ratio, aggregation="balanced", **hp)
    ref.backward()
    torch.testing.assert_close(total, ref.detach(), **TOL)
    torch.testing.assert_close(lp.grad, lp_ref.grad, **TOL)


def test_balanced_estimator_needs_uids():
    with pytest.raises(ValueError, match="uid"):
        core_algos.get_adv_estimator_fn("grpolab_balanced")(
            token_level_rewards=torch.zeros(2, 3), response_mask=torch.ones(2, 3), config=AlgoConfig())


def test_plugin_entry_point_registers_on_import_verl():
    """The one-line plug-in: a fresh `import verl` finds grpolab's losses (entry point)."""
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("grpolab") == "grpolab.integrations.verl.plugin"
    code = ("import verl\nfrom verl.trainer.ppo import core_algos as c\n"
            "print(sorted(n for n in c.POLICY_LOSS_REGISTRY if 'grpolab' in n or n == 'ctpo'),"
            " 'grpolab_balanced' in c.ADV_ESTIMATOR_REGISTRY)")
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == (
        "['ctpo', 'grpolab', 'grpolab_cumulative', 'grpolab_gspo', 'grpolab_sequence'] True")


def test_apply_credit_commutes_with_balanced_folding():
    """RLSD on BA-folded verl advantages == grpolab's RLSD advantages under aggregation='balanced'."""
    B, T, G = 8, 9, 4
    logp, old, _, mask, _, gids, rewards = _batch(B=B, T=T, G=G, seed=7, spread=0.2)
    g = torch.Generator().manual_seed(8)
    teacher = old + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)
    tlr = torch.zeros(B, T, dtype=torch.float64)
    tlr[:, 0] = rewards
    uids = np.array([str(int(x)) for x in gids], dtype=object)
    adv, _ = core_algos.get_adv_estimator_fn("grpolab_balanced")(
        token_level_rewards=tlr, response_mask=mask, index=uids, config=AlgoConfig())
    adv_c = gv.apply_credit(adv, old, teacher, mask, method="rlsd", lam=0.5, eps_w=0.2)
    lp = logp.clone().requires_grad_()
    loss, _ = core_algos.get_policy_loss_fn("grpolab")(old, lp, adv_c, mask, gv.BALANCED_LOSS_AGG_MODE,
                                                       _config(global_batch_size=B))
    loss.backward()
    adv_B = group_advantages(rewards, gids)
    adv_t = rlsd_advantages(adv_B, old, teacher, mask, lam=0.5, eps_w=0.2)
    lp_ref = logp.clone().requires_grad_()
    ref, _ = policy_loss(lp_ref, old, adv_t, mask.double(), group_ids=gids, aggregation="balanced",
                         clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    ref.backward()
    torch.testing.assert_close(loss, ref.detach(), **TOL)
    torch.testing.assert_close(lp.grad, lp_ref.grad, **TOL)
    with pytest.raises(ValueError, match="rlsd or gear"):
        gv.apply_credit(adv, old, teacher, mask, method="opsd")


def test_example_config_composes_and_passes_verl_validation(monkeypatch):
    """examples/verl's Hydra config resolves to verl's dataclasses and passes verl's own checks."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    monkeypatch.setenv("HOME", "/tmp")
    here = Path(__file__).resolve().parents[3] / "examples" / "verl"
    with initialize_config_dir(config_dir=str(here), version_base=None):
        cfg = compose(config_name="grpolab_qwen2.5_math_1.5b")
    OmegaConf.resolve(cfg)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == "ctpo" and actor.loss_agg_mode == gv.BALANCED_LOSS_AGG_MODE
    assert cfg.algorithm.adv_estimator == gv.BALANCED_ESTIMATOR
    core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    validate_config(cfg, use_reference_policy=False, use_critic=False)
