"""Contract tests of the TRL adapter on CPU: a tiny model, TRL's own GRPOTrainer machinery.

- the loss the subclass computes equals grpolab's ``policy_loss`` on the same inputs (loss and
  gradient), with log-probs from grpolab's own forward, not TRL's;
- splitting a generation batch into micro-steps reproduces the full-batch loss;
- a few training steps run with aggregation=balanced, ratio=cumulative, credit=rlsd (and gear).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("trl", reason="trl is in the test extra: pip install -e '.[test]'")
from datasets import Dataset  # noqa: E402

from grpolab.integrations.trl.trainer import GrpolabGRPOConfig, GrpolabGRPOTrainer, row_weights  # noqa: E402
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer  # noqa: E402
from grpolab.objectives import aggregation_weights, policy_loss  # noqa: E402
from grpolab.rollout.logprobs import response_logprobs  # noqa: E402

SMALL = TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _digits(prompts, completions, **kwargs):
    """A reward that varies between samples of a random model: the fraction of digit characters."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def _dataset(n=16):
    prompts = [f"{a}+{b}=" for a, b in zip(range(10, 10 + n), range(20, 20 + n))]
    return Dataset.from_dict({"prompt": prompts, "reference": [str(int(p[:2]) + int(p[3:5])) for p in prompts]})


def _args(tmp_path, **kw):
    base = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, gradient_accumulation_steps=2,
        num_generations=4, max_completion_length=8, max_steps=2, learning_rate=1e-2, temperature=1.0,
        beta=0.0, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, use_cpu=True,
        bf16=False, fp16=False, seed=0, dataloader_num_workers=0,
    )
    # TRL turns activation checkpointing on by default; the argument's name depends on transformers
    names = {f.name for f in dataclasses.fields(GrpolabGRPOConfig)}
    base["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
    base.update(kw)
    return GrpolabGRPOConfig(**base)


def _trainer(tmp_path, **kw):
    torch.manual_seed(0)
    tok = build_tokenizer()
    model = build_tiny_model(tok, SMALL, seed=0)
    return GrpolabGRPOTrainer(model=model, processing_class=tok, reward_funcs=_digits,
                              args=_args(tmp_path, **kw), train_dataset=_dataset())


def _inputs(trainer, B=8, T=7, G=4, seed=0):
    """A hand-made batch: equal-length prompts (no left padding), ragged completions."""
    tok = trainer.processing_class
    g = torch.Generator().manual_seed(seed)
    prompt = tok(["12+34="] * B, add_special_tokens=True, return_tensors="pt")
    V = len(tok)
    completion_ids = torch.randint(5, V, (B, T), generator=g)
    lengths = torch.tensor([7, 3, 5, 1, 6, 7, 2, 4])[:B]
    completion_mask = (torch.arange(T) < lengths[:, None]).long()
    adv_B = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.8, -1.2, 0.4, 0.0])[:B]
    adv_BT = adv_B[:, None] * (1 + 0.3 * torch.rand(B, T, generator=g))  # per-token, as after credit
    gids = torch.arange(B) // G
    with torch.no_grad():
        logp = response_logprobs(trainer.model, (prompt["input_ids"], prompt["attention_mask"], completion_ids,
                                                 completion_mask)).logp
    old = logp + 0.3 * torch.randn(B, T, generator=g)  # off-policy enough for the clip to bind
    w = row_weights(completion_mask.sum(-1).float(), adv_B, gids, "balanced")
    inputs = {
        "prompt_ids": prompt["input_ids"], "prompt_mask": prompt["attention_mask"],
        "completion_ids": completion_ids, "completion_mask": completion_mask,
        "advantages": adv_BT, "old_per_token_logps": old, "grpolab_row_weight": w,
        "num_items_in_batch": completion_mask.sum(),
    }
    return inputs, adv_B, gids


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    return _trainer(tmp_path_factory.mktemp("trl"), grpolab_aggregation="balanced", grpolab_ratio="cumulative",
                    epsilon=0.025, epsilon_high=0.05, grpolab_dual_clip=None)


def test_row_weights_equal_aggregation_weights():
    lengths = torch.tensor([3.0, 0.0, 5.0, 2.0, 4.0, 4.0])
    adv = torch.tensor([1.0, -1.0, -0.5, 0.0, 0.7, -0.7])
    gids = torch.tensor([0, 0, 0, 1, 1, 1])
    mask = (torch.arange(5) < lengths[:, None]).float()
    for mode in ("token", "sequence", "constant", "balanced"):
        W = aggregation_weights(mask, mode, advantages=adv, group_ids=gids, max_len=8)
        w = row_weights(lengths, adv, gids, mode, max_len=8)
        torch.testing.assert_close(mask * w[:, None], W, rtol=0, atol=0)


def test_subclass_loss_equals_grpolab_policy_loss(trainer):
    model = trainer.model
    model.train()
    inputs, _, gids = _inputs(trainer)
    model.zero_grad()
    loss = trainer._compute_loss(model, inputs)
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logp = response_logprobs(model, (inputs["prompt_ids"], inputs["prompt_mask"], inputs["completion_ids"],
                                     inputs["completion_mask"])).logp
    ref, m = policy_loss(logp, inputs["old_per_token_logps"], inputs["advantages"], inputs["completion_mask"],
                         group_ids=gids, ratio="cumulative", aggregation="balanced",
                         clip_low=0.025, clip_high=0.05, dual_clip=None, clip_power=0.5)
    ref.backward()
    assert m["clip_frac"] > 0  # the clip binds somewhere: the comparison covers clipped tokens
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-7)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)
    model.zero_grad()


def test_micro_steps_reproduce_full_batch(trainer):
    model = trainer.model
    inputs, *_ = _inputs(trainer, seed=1)
    with torch.no_grad():
        full = trainer._compute_loss(model, inputs)
        parts = 0.0
        for rows in (slice(0, 3), slice(3, 8)):  # uneven split: weights, not counts, carry the normaliser
            part = {k: (v[rows] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in inputs.items()}
            parts = parts + trainer._compute_loss(model, part)
    torch.testing.assert_close(parts, full, rtol=1e-5, atol=1e-7)


def test_config_refuses_what_it_does_not_replace(tmp_path):
    with pytest.raises(ValueError, match="grpolab_ratio"):
        _args(tmp_path, importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="loss_type"):
        _args(tmp_path, loss_type="cispo")
    with pytest.raises(ValueError, match="grpolab_credit"):
        _args(tmp_path, grpolab_credit_name="opsd2")
    with pytest.raises(ValueError, match="aggregation"):
        _args(tmp_path, grpolab_aggregation="mean")


@pytest.mark.parametrize("credit", ["rlsd", pytest.param("gear", marks=pytest.mark.slow)])
def test_trains_with_balanced_cumulative_and_credit(tmp_path, credit):
    tr = _trainer(tmp_path, grpolab_aggregation="balanced", grpolab_ratio="cumulative", epsilon=0.025,
                  epsilon_high=0.05, grpolab_credit_name=credit, steps_per_generation=2, num_iterations=2)
    before = [p.detach().clone() for p in tr.model.parameters()]
    seen = {}
    orig = tr._generate_and_score_completions

    def spy(inputs):
        out = orig(inputs)
        seen.setdefault("adv_shapes", []).append(tuple(out["advantages"].shape))
        seen.setdefault("weights", []).append(out["grpolab_row_weight"].clone())
        return out

    tr._generate_and_score_completions = spy
    tr.train()
    assert tr.state.global_step == 2
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, tr.model.parameters()))
    assert changed > 0
    logs = {k for row in tr.state.log_history for k in row}
    assert {"grpolab/credit/lam", "grpolab/clip_frac", "reward"} <= logs
    # credit turned TRL's [B] advantages into per-token ones
    assert all(len(s) == 2 for s in seen["adv_shapes"])
    losses = [row["loss"] for row in tr.state.log_history if "loss" in row]
    assert losses and all(torch.isfinite(torch.tensor(x)) for x in losses)


def test_token_settings_reproduce_trls_own_dapo_loss(tmp_path):
    """grpolab_aggregation=token, grpolab_ratio=token, no dual clip == TRL's own loss_type='dapo'."""
    from trl import GRPOTrainer

    tr = _trainer(tmp_path, grpolab_aggregation="token", grpolab_ratio="token", grpolab_dual_clip=None,
                  epsilon=0.2, epsilon_high=0.28, loss_type="dapo")
    inputs, adv_B, gids = _inputs(tr, seed=2)
    inputs["advantages"] = adv_B  # TRL's own loss takes [B] advantages
    inputs["grpolab_row_weight"] = row_weights(inputs["completion_mask"].sum(-1).float(), adv_B, gids, "token")
    model = tr.model
    model.train()
    ours = tr._compute_loss(model, inputs)
    ours.backward()
    g_ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    tr.current_gradient_accumulation_steps = tr.args.gradient_accumulation_steps  # set by train() otherwise
    assert tr.args.steps_per_generation == tr.args.gradient_accumulation_steps  # one batch per optimizer step
    theirs = GRPOTrainer._compute_loss(tr, model, inputs)  # TRL's implementation, same trainer state
    theirs.backward()
    assert tr._metrics["train"]["clip_ratio/region_mean"][-1] > 0  # TRL saw clipped tokens too
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    for g, p in zip(g_ours, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_credit_follows_the_shared_settings(tmp_path):
    """The credit step reads grpolab's one schema (grpolab_credit_<field>): ``span_end`` ends the
    reweighted span, ``lam_schedule`` drives lam, the frozen teacher is a copy re-synced every
    ``teacher_sync_every`` steps."""
    tr = _trainer(tmp_path, grpolab_credit_name="rlsd", grpolab_credit_span_end="5", grpolab_credit_lam=0.3,
                  grpolab_credit_lam_schedule="constant", grpolab_credit_teacher_sync_every=2)
    batch, adv_B, _ = _inputs(tr, seed=3)
    tok = tr.processing_class
    five = tok.convert_tokens_to_ids("5")
    ids = batch["completion_ids"]
    ids[ids == five] = five + 1
    ids[0, 3] = five                                          # row 0: the span ends at its 4th token
    out = {k: batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")}
    rows = [{"prompt": "12+34=", "reference": "46"}] * ids.shape[0]
    mask = batch["completion_mask"]
    tr.state.global_step = 40
    adv = tr._credit(rows, out, mask, adv_B, "train")
    assert torch.equal(adv[0, 3:7], adv_B[0].expand(4))       # from the span end on: the sequence advantage
    assert not torch.equal(adv[0, :3], adv_B[0].expand(3))    # before it: reweighted by the teacher
    assert tr._metrics["train"]["grpolab/credit/lam"][-1] == 0.3  # constant: lam at step 40 is still lam
    tr.state.global_step = 0
    policy = tr._policy()
    teacher = tr._teacher()
    assert teacher is not policy and all(torch.equal(a, b) for a, b in zip(teacher.parameters(), policy.parameters()))
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)
    tr.state.global_step = 1
    assert tr._teacher() is teacher and not torch.equal(next(teacher.parameters()), next(policy.parameters()))
    tr.state.global_step = 2                                  # due: re-synced to the policy
    assert torch.equal(next(tr._teacher().parameters()), next(policy.parameters()))


def test_adapter_sends_no_telemetry(tmp_path, monkeypatch):
    """TRL's trainer reports its use to the Hugging Face Hub when built (huggingface_hub's
    send_telemetry, skipped only offline or under CI); grpolab's trainer sends nothing, whatever the
    environment says."""
    import trl.trainer.base_trainer as base

    calls = []
    monkeypatch.setattr(base, "send_telemetry", lambda *a, **k: calls.append((a, k)))
    monkeypatch.delenv("CI", raising=False)
    _trainer(tmp_path)
    assert calls == []
    # the hook is live: TRL's own method would have called it
    base._BaseTrainer._send_telemetry(_trainer(tmp_path / "b"))
    assert len(calls) == 1
