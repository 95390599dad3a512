"""Credit settings written once: grpolab's own trainer (the ``credit`` section), the TRL adapter
(``grpolab_credit_<field>``) and the verl extension (``grpolab.credit.<field>``) read one schema,
:class:`grpolab.config.CreditConfig` -- the same names, the same defaults, the same validation and
the same spelling of "no credit" (``grpo``); the teacher's template text has one source
(grpolab.utils.teacher_templates)."""

import dataclasses

import pytest

from grpolab.config import ConfigError, CreditConfig, load_config
from grpolab.integrations.verl import credit as vc
from grpolab.utils import teacher_templates as tt

FIELDS = [f.name for f in dataclasses.fields(CreditConfig)]


def _trl_base(tmp_path):
    return dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, fp16=False,
                per_device_train_batch_size=4, num_generations=4)


def test_the_teacher_templates_have_one_source():
    from grpolab.teacher_text import DEFAULT_TEACHER_TEMPLATE, teacher_messages

    own = CreditConfig()
    assert (own.template, own.chat_template, own.system_template) == (
        tt.DEFAULT_TEACHER_TEMPLATE, tt.DEFAULT_CHAT_TEACHER_TEMPLATE, tt.DEFAULT_SYSTEM_TEACHER_TEMPLATE)
    assert DEFAULT_TEACHER_TEMPLATE == tt.DEFAULT_TEACHER_TEMPLATE
    assert vc.VerlCreditConfig().chat_template == tt.DEFAULT_CHAT_TEACHER_TEMPLATE
    item = type("Item", (), {"privileged": "SOL", "reference": "7"})()
    msgs = teacher_messages([{"role": "user", "content": "Q?"}], item)        # the default is the shared text
    assert msgs == [{"role": "user", "content": "Q?\n\nHere is a reference solution:\nSOL\n\n"
                                                "Solve the problem in your own way."}]


def test_verl_reads_the_schema_with_the_same_defaults_except_what_verls_workers_decide():
    own, verl = dataclasses.asdict(CreditConfig()), dataclasses.asdict(vc.VerlCreditConfig())
    assert set(verl) == set(own) | {"privileged_key"}
    differ = {k for k in own if verl[k] != own[k]}
    assert differ == set(vc.VERL_FIXED)                       # each with its one possible value and the reason
    assert {k: verl[k] for k in differ} == {k: v for k, (v, _) in vc.VERL_FIXED.items()} == {
        "teacher_sync_every": 0, "divergence": "logratio"}
    assert own["name"] == verl["name"] == "grpo"              # no credit is spelled the same
    assert not vc.VerlCreditConfig().enabled and not CreditConfig().enabled


def test_trl_arguments_are_the_schema_with_a_prefix_and_the_same_defaults(tmp_path):
    pytest.importorskip("trl")
    from grpolab.integrations.trl.trainer import CREDIT_PREFIX, GrpolabGRPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(GrpolabGRPOConfig)}
    trl = {k[len(CREDIT_PREFIX):]: v for k, v in defaults.items() if k.startswith(CREDIT_PREFIX)}
    assert trl == dataclasses.asdict(CreditConfig())           # every field, named and defaulted alike
    args = GrpolabGRPOConfig(**_trl_base(tmp_path))
    assert args.grpolab_credit_settings == CreditConfig()
    assert args.grpolab_credit_name == "grpo" and not args.grpolab_credit_settings.enabled


def test_a_misspelled_value_gets_the_same_message_in_all_three(tmp_path):
    pytest.importorskip("trl")
    from grpolab.integrations.trl.trainer import GrpolabGRPOConfig

    tail = "='rlds' is not allowed; choose one of: grpo, rlsd, gear, opsd"
    with pytest.raises(ConfigError, match="^credit.name" + tail):
        load_config(None, ["credit.name=rlds"])
    with pytest.raises(ValueError, match="^grpolab_credit_name" + tail):
        GrpolabGRPOConfig(**_trl_base(tmp_path), grpolab_credit_name="rlds")
    with pytest.raises(ValueError, match="^grpolab.credit.name" + tail):
        vc.VerlCreditConfig.from_mapping({"name": "rlds"})
    with pytest.raises(ValueError, match="^grpolab_credit_gear_threshold='median' is not allowed; choose one of: mad"):
        GrpolabGRPOConfig(**_trl_base(tmp_path), grpolab_credit_name="gear", grpolab_credit_gear_threshold="median")
    with pytest.raises(ValueError, match="grpolab_credit_name='opsd' is grpolab's own trainer's only"):
        GrpolabGRPOConfig(**_trl_base(tmp_path), grpolab_credit_name="opsd")


def test_a_misspelled_key_names_the_closest_one():
    with pytest.raises(ConfigError, match="unknown credit key grpolab.credit.gear_treshold; did you mean "
                                          "grpolab.credit.gear_threshold"):
        vc.VerlCreditConfig.from_mapping({"name": "gear", "gear_treshold": "mad"})
    with pytest.raises(ConfigError, match="unknown config key 'credit.lamda'"):
        load_config(None, ["credit.lamda=0.3"])


def test_teacher_sync_every_zero_means_never(tmp_path):
    """0 = the frozen teacher is never re-synced (the initial policy), in the own trainer and TRL."""
    import torch

    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.train.credit import CreditStep

    tok = build_tokenizer()
    policy = build_tiny_model(tok, TinyModelConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                   intermediate_size=32), seed=0)
    step = CreditStep(CreditConfig(name="rlsd", teacher_sync_every=0), policy, tok)
    before = {k: v.clone() for k, v in step.teacher.state_dict().items()}
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    for s in (1, 10, 20):
        step.maybe_sync(s, policy)
    assert all(torch.equal(v, before[k]) for k, v in step.teacher.state_dict().items())
    synced = CreditStep(CreditConfig(name="rlsd", teacher_sync_every=10), policy, tok)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(1.0)
    synced.maybe_sync(10, policy)
    assert all(torch.equal(v, policy.state_dict()[k]) for k, v in synced.teacher.state_dict().items())
    with pytest.raises(ConfigError, match="credit.teacher_sync_every=-1 must be >= 0"):
        CreditConfig(teacher_sync_every=-1).validate()
