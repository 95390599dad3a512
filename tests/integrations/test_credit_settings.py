"""Credit settings written once: grpolab's own trainer, the TRL adapter and the verl extension share
the teacher's template text (grpolab.utils.teacher_templates), the credit defaults, and the spelling
of "no credit" (grpo)."""

import dataclasses

import pytest

from grpolab.config import CreditConfig
from grpolab.integrations import verl_credit as vc
from grpolab.utils import teacher_templates as tt


def test_the_teacher_templates_have_one_source():
    from grpolab.rollout.teacher import DEFAULT_TEACHER_TEMPLATE, teacher_messages

    own = CreditConfig()
    assert (own.template, own.chat_template, own.system_template) == (
        tt.DEFAULT_TEACHER_TEMPLATE, tt.DEFAULT_CHAT_TEACHER_TEMPLATE, tt.DEFAULT_SYSTEM_TEACHER_TEMPLATE)
    assert DEFAULT_TEACHER_TEMPLATE == tt.DEFAULT_TEACHER_TEMPLATE
    assert vc.VerlCreditConfig().template == tt.DEFAULT_CHAT_TEACHER_TEMPLATE
    item = type("Item", (), {"privileged": "SOL", "reference": "7"})()
    msgs = teacher_messages([{"role": "user", "content": "Q?"}], item)        # the default is the shared text
    assert msgs == [{"role": "user", "content": "Q?\n\nHere is a reference solution:\nSOL\n\n"
                                                "Solve the problem in your own way."}]


def test_verl_shares_the_own_trainers_credit_defaults():
    own, verl = dataclasses.asdict(CreditConfig()), dataclasses.asdict(vc.VerlCreditConfig())
    shared = ("lam", "lam_end", "lam_steps", "lam_schedule", "eps_w", "negative_only", "gear_threshold", "gear_k",
              "gear_quantile", "gear_min_divergence", "gear_boundaries")
    assert {k: verl[k] for k in shared} == {k: own[k] for k in shared}


def test_trl_spells_no_credit_grpo_and_shares_the_defaults(tmp_path):
    pytest.importorskip("trl")
    from grpolab.integrations.trl import GrpolabGRPOConfig

    fields = {f.name: f.default for f in dataclasses.fields(GrpolabGRPOConfig)}
    own = CreditConfig()
    assert fields["grpolab_credit"] == "grpo"
    assert (fields["grpolab_credit_lam"], fields["grpolab_credit_lam_end"], fields["grpolab_credit_lam_steps"],
            fields["grpolab_credit_eps_w"], fields["grpolab_credit_negative_only"]) == (
        own.lam, own.lam_end, own.lam_steps, own.eps_w, own.negative_only)
    assert (fields["grpolab_teacher_template"], fields["grpolab_teacher_chat_template"],
            fields["grpolab_teacher_system_template"]) == (own.template, own.chat_template, own.system_template)
    base = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, fp16=False,
                per_device_train_batch_size=4, num_generations=4)
    for spelling in ("grpo", "none"):                                       # the earlier spelling still works
        assert GrpolabGRPOConfig(**base, grpolab_credit=spelling).grpolab_credit == spelling
    with pytest.raises(ValueError, match="grpolab_credit='nope'"):
        GrpolabGRPOConfig(**base, grpolab_credit="nope")
