"""The credit step inside the trainer: metrics per method, lam = 0 is GRPO bit for bit, the frozen
teacher survives a crash and resume exactly, config validation.

The tiny models here barely solve anything after 4 warm-start steps, so every reward would be 0
and every advantage too; the advantage estimator is replaced by a deterministic function of the
rewards and the response lengths (so the credit step has rows to reweight). Nothing else changes.
"""

import math

import pytest
import torch

from grpolab import objectives as obj
from grpolab.config import ConfigError, load_config
from grpolab.models import load_model
from grpolab.teacher_text import DEFAULT_TEACHER_TEMPLATE
from grpolab.train import train
from grpolab.train.checkpoint import latest_checkpoint
from grpolab.train.credit import CreditStep, leakage
from grpolab.rollout.experience import Experience
from grpolab.train.metrics_log import read_metrics

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
    "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=16", "sft.n_eval=8",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=16",
    "trainer.eval_every=2", "trainer.save_every=2", "log.progress=false", "log.plots=false",
    "log.tensorboard=false", "trainer.preflight=false",
]
VOLATILE = ("time/", "tokens_per_s", "timing_s/", "perf/throughput", "memory/")  # + their verl-style aliases


def _stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _cfg(run_dir, *extra):
    return load_config(overrides=SMALL + [f"trainer.run_dir={run_dir}", *extra])


@pytest.fixture(autouse=True)
def mixed_advantages(monkeypatch):
    real = obj.get_advantage_estimator

    def fake_estimator(name):
        grpo = real(name)

        def adv(rewards, group_ids):
            # a deterministic mix of signs: alternate within each group, plus the real advantage
            alt = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(rewards))]) * 0.7
            alt[::3] = 0.0                                  # and some zero-advantage rows
            return grpo(rewards, group_ids) + alt
        return adv

    monkeypatch.setattr(obj, "get_advantage_estimator", fake_estimator)


@pytest.mark.slow
@pytest.mark.parametrize("extra", [
    ["credit.name=rlsd", "credit.negative_only=true", "credit.span_end=#"],
    ["credit.name=gear", "credit.teacher=live"],
    ["credit.name=gear", "credit.divergence=logratio", "credit.gear_threshold=quantile"],
    ["credit.name=opsd"],
])
def test_credit_methods_train_and_log_their_metrics(tmp_path, extra):
    train(_cfg(tmp_path / "run", "trainer.steps=2", *extra), log=lambda *_: None)
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        for k in ("credit/lam", "credit/kl_sampled", "credit/delta_mean", "credit/delta_std", "credit/clip_frac",
                  "credit/leak_mention_frac", "credit/leak_copy_frac", "time/teacher"):
            assert k in r and math.isfinite(r[k]), k
        assert r["credit/scored_rows_frac"] > 0
    assert rows[0]["credit/lam"] == 0.5 and rows[1]["credit/lam"] == pytest.approx(0.49)
    if "credit.name=gear" in extra:
        assert all("credit/segments_per_seq" in r and "credit/segment_len" in r for r in rows)
        if "credit.divergence=logratio" not in extra:
            assert all(r["credit/kl"] >= 0 for r in rows)
    if "credit.name=opsd" in extra:
        assert rows[0]["credit/scored_rows_frac"] == 1.0


@pytest.mark.slow
def test_lam_zero_is_grpo_bit_for_bit(tmp_path):
    steps = ["trainer.steps=2"]
    train(_cfg(tmp_path / "grpo", *steps), log=lambda *_: None)
    train(_cfg(tmp_path / "rlsd", *steps, "credit.name=rlsd", "credit.lam=0", "credit.lam_end=0"),
          log=lambda *_: None)
    a, b = _stable(read_metrics(tmp_path / "grpo")), _stable(read_metrics(tmp_path / "rlsd"))
    for ra, rb in zip(a, b):
        assert {k: v for k, v in rb.items() if not k.startswith("credit/")} == ra
    assert b[0]["credit/scored_rows_frac"] > 0                     # the teacher really ran
    m_a, _ = load_model(tmp_path / "grpo" / "final")
    m_b, _ = load_model(tmp_path / "rlsd" / "final")
    for (k, x), (_, y) in zip(m_a.state_dict().items(), m_b.state_dict().items()):
        assert torch.equal(x, y), k


def test_short_rlsd_crash_and_resume_matches_the_uninterrupted_run(tmp_path, kill_during_step):
    # CI-sized: 3 steps, a checkpoint every step, killed during step 3; the teacher re-syncs at
    # step 2, so the checkpoint at step 2 must carry the synced teacher for step 3 to match
    steps = ["trainer.steps=3", "trainer.save_every=1", "trainer.eval_every=3", "credit.name=rlsd",
             "credit.teacher_sync_every=2", "rollout.prompts_per_step=2", "rollout.max_new_tokens=8",
             "sft.max_steps=2"]
    train(_cfg(tmp_path / "full", *steps), log=lambda *_: None)
    rows_full = _stable(read_metrics(tmp_path / "full"))
    assert all("credit/lam" in r for r in rows_full)
    kill_during_step(3, lambda: train(_cfg(tmp_path / "crashed", *steps), log=lambda *_: None))
    assert latest_checkpoint(tmp_path / "crashed").step == 2
    train(_cfg(tmp_path / "crashed", *steps), resume=True, log=lambda *_: None)
    assert _stable(read_metrics(tmp_path / "crashed")) == rows_full
    m_full, _ = load_model(tmp_path / "full" / "final")
    m_res, _ = load_model(tmp_path / "crashed" / "final")
    for (k, a), (_, b) in zip(m_full.state_dict().items(), m_res.state_dict().items()):
        assert torch.equal(a, b), k


@pytest.mark.slow
@pytest.mark.parametrize("break_restore", [False, True])
def test_frozen_teacher_survives_crash_and_resume(tmp_path, monkeypatch, break_restore, kill_during_step):
    # sync every 3 steps: the checkpoint at step 2 holds the step-0 teacher, which differs from the
    # step-2 policy; the resumed run must score step 3 with that teacher, then re-sync at step 3
    steps = ["trainer.steps=4", "credit.name=gear", "credit.teacher_sync_every=3", "credit.lam=1",
             "credit.lam_schedule=constant"]
    train(_cfg(tmp_path / "full", *steps), log=lambda *_: None)
    rows_full = read_metrics(tmp_path / "full")

    kill_during_step(3, lambda: train(_cfg(tmp_path / "crashed", *steps), log=lambda *_: None))
    assert latest_checkpoint(tmp_path / "crashed").step == 2
    if break_restore:  # proves the test can fail: a teacher rebuilt from the resumed policy
        monkeypatch.setattr(CreditStep, "load_state_dict", lambda self, state: None)
    train(_cfg(tmp_path / "crashed", *steps), resume=True, log=lambda *_: None)
    rows_res = _stable(read_metrics(tmp_path / "crashed"))
    if break_restore:
        assert rows_res[2] != _stable(rows_full)[2]
        return
    assert rows_res == _stable(rows_full)
    m_full, _ = load_model(tmp_path / "full" / "final")
    m_res, _ = load_model(tmp_path / "crashed" / "final")
    for (k, a), (_, b) in zip(m_full.state_dict().items(), m_res.state_dict().items()):
        assert torch.equal(a, b), k


def test_teacher_sync_schedule(tmp_path):
    cfg = _cfg(tmp_path / "x", "credit.name=rlsd", "credit.teacher_sync_every=2")
    policy = torch.nn.Linear(2, 2)
    from grpolab.models import build_tokenizer

    step = CreditStep.from_config(cfg, policy, build_tokenizer())
    w0 = step.teacher.weight.clone()
    with torch.no_grad():
        policy.weight.add_(1.0)
    step.maybe_sync(1, policy)
    assert torch.equal(step.teacher.weight, w0)                  # not due
    step.maybe_sync(2, policy)
    assert torch.equal(step.teacher.weight, policy.weight)       # due at 2, 4, ...
    assert not step.teacher.weight.requires_grad
    live = CreditStep.from_config(_cfg(tmp_path / "y", "credit.name=rlsd", "credit.teacher=live"), policy, build_tokenizer())
    assert live.teacher is None and live.state_dict() is None


def test_leakage_counter():
    from grpolab.tasks import TaskItem

    items = [TaskItem(prompt="1+2=", reference="3", privileged="1+2=3#3 long enough")] * 4
    completions = ["1+2=3#3", "as the reference says 3", "solve it in your own way. 3", "1+2=3#3 long enough!"]
    m = leakage(completions, items, DEFAULT_TEACHER_TEMPLATE)
    assert m["credit/leak_mention_frac"] == 0.5                   # "reference", and a template line
    assert m["credit/leak_copy_frac"] == 0.25                     # the privileged text verbatim


def test_default_template_is_the_rollout_default():
    assert load_config().credit.template == DEFAULT_TEACHER_TEMPLATE


@pytest.mark.parametrize("override,match", [
    ("credit.name=rlds", "credit.name='rlds' is not allowed; choose one of: grpo, rlsd, gear, opsd"),
    ("credit.lam=1.5", r"credit.lam=1.5 must be in \[0, 1\]"),
    ("credit.eps_w=1.0", "eps_w=1.0 must be in"),
    ("credit.teacher=ema", "credit.teacher='ema' is not allowed; choose one of: frozen, live"),
    ("credit.teacher_sync_every=-1", "credit.teacher_sync_every=-1 must be >= 0"),
    ("credit.divergence=js", "credit.divergence='js' is not allowed; choose one of: kl, logratio"),
    ("credit.gear_threshold=iqr", "credit.gear_threshold='iqr' is not allowed; choose one of: mad, quantile"),
    ("credit.template=no placeholders", r"must contain \{prompt\} and \{privileged\}"),
    ("credit.lam_schedule=cosine", "credit.lam_schedule='cosine' is not allowed"),
])
def test_config_errors_name_the_fix(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(overrides=[override])


def test_credit_step_on_a_sampled_batch():
    # the glue without training: only rows with A != 0 are scored, the teacher sees the template
    # text built here by hand, GEAR segments end after ';' tokens, span_end='#' stops reweighting
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import left_pad, sample, teacher_logprobs
    from grpolab.tasks import get_task

    tok = build_tokenizer()
    policy = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=64), seed=0).eval()
    items = get_task("arith").items("train", 3)
    G = 4
    prompts = [[tok.bos_token_id] + tok(it.prompt, add_special_tokens=False)["input_ids"] for it in items]
    r = sample(policy, prompts, group_size=G, max_new_tokens=12, temperature=1.0, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    adv = torch.tensor([0.0, 1.0, -1.0, 0.5] * 3)
    cfg = load_config(overrides=["credit.name=gear", "credit.lam=1", "credit.span_end=#", "credit.gear_k=0"])
    step = CreditStep.from_config(cfg, policy, tok)
    exp = Experience(items=items, rollout=r, texts=["x"] * 12, rewards=torch.zeros(12), advantages=adv)
    out = step(0, policy, exp)
    scored = adv != 0
    assert (out.teacher_logp[~scored] == 0).all() and (out.advantages[~scored] == 0).all()
    text = [f"{it.prompt}\nhere is a reference solution: {it.privileged}\nsolve it in your own way.\n{it.prompt}"
            for it in items]
    rows = [[tok.bos_token_id] + tok(text[i // G], add_special_tokens=False)["input_ids"] for i in range(12)]
    t_ids, t_mask = left_pad(rows, tok.pad_token_id)
    direct = teacher_logprobs(policy, t_ids, t_mask, r, return_kl=True)
    torch.testing.assert_close(out.teacher_logp[scored], direct.logp[scored], atol=1e-5, rtol=0)
    torch.testing.assert_close(out.divergence[scored], direct.kl[scored], atol=1e-5, rtol=0)
    semi = tok.convert_tokens_to_ids(";")
    seg = out.segment_ids
    after_semi = torch.zeros_like(seg, dtype=torch.bool)
    after_semi[:, 1:] = r.response_ids[:, :-1] == semi
    # a segment never continues across a ';' (a token after ';' is in the same segment as the ';' only
    # if it is a new anchor, which has a new id)
    cont = after_semi & (seg > 0) & (seg == torch.cat([torch.zeros_like(seg[:, :1]), seg[:, :-1]], 1))
    assert not cont.any()
    # tokens at and after the first '#' keep the plain advantage (span_end)
    hash_id = tok.convert_tokens_to_ids("#")
    after_hash = (r.response_ids == hash_id).long().cumsum(-1) > 0
    keep = after_hash & r.response_mask.bool()
    torch.testing.assert_close(out.advantages[keep], adv[:, None].expand_as(seg)[keep].float())
    assert out.metrics["credit/scored_rows_frac"] == 0.75 and out.metrics["credit/kl"] > 0


def test_credit_decisions_come_from_the_credit_config(monkeypatch):
    # the trainer asks CreditConfig, not the method's name: enabled (no credit step for grpo),
    # segment_boundaries (GEAR's only: the other methods skip the vocabulary scan), scores_all_rows
    from grpolab.config import CreditConfig
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.train.state import TrainState

    c = {n: CreditConfig(name=n) for n in ("grpo", "rlsd", "gear", "opsd")}
    assert [c[n].enabled for n in c] == [False, True, True, True]
    assert [c[n].segment_boundaries for n in c] == ["", "", "\n;", ""]
    assert [c[n].scores_all_rows for n in c] == [False, False, False, True]
    cfg = load_config(overrides={"credit.name": "rlsd", "sft.enabled": "no"})
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64))
    state = TrainState.create(cfg, model, tok, torch.Generator().manual_seed(0))
    assert isinstance(state.credit, CreditStep)
    assert len(state.credit.tokens.boundary_ids) == 0  # RLSD has no segments: no boundary tokens
    monkeypatch.setattr(CreditConfig, "enabled", property(lambda self: False))
    assert TrainState.create(cfg, model, tok, torch.Generator().manual_seed(0)).credit is None
