"""Config validation: every bad input stops before work with a message naming the key and the fix."""

import pytest

from grpolab.config import Config, ConfigError, PRESETS, config_from_dict, load_config


def test_defaults_validate():
    cfg = load_config()
    assert cfg.objective.ratio == "token" and cfg.objective.aggregation == "token"
    assert cfg.rollout.group_size >= 2


@pytest.mark.parametrize(
    "override, needle",
    [
        ("objective.aggregation=tokn", "choose one of: token, sequence, constant, balanced"),
        ("objective.ratio=prefix", "objective.ratio='prefix'"),
        ("trainer.stepz=3", "trainer has: trainer.steps"),
        ("nosuch.key=1", "unknown config section 'nosuch'"),
        ("optim.lr=-1", "optim.lr=-1.0 must be > 0"),
        ("trainer.steps=1.5", "must be an integer"),
        ("log.wandb=maybe", "must be a boolean"),
        ("rollout.top_p=0", "rollout.top_p=0.0 must be in (0, 1]"),
        ("objective.dual_clip=0.5", "dual_clip must be > 1"),
        ("rollout.group_size=1", "rollout.group_size >= 2"),
        ("trainer.mini_batches=99", "lower trainer.mini_batches"),
        ("model.num_heads=5", "divisible by model.num_heads"),
        ("noequals", "section.key=value"),
        ("task.n_train=8", "raise task.n_train"),
        ("preset=nope", "preset='nope'"),
    ],
)
def test_bad_overrides_name_the_key(override, needle):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[override])
    assert needle in str(e.value)


def test_yaml_file_presets_and_overrides(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("preset: ctpo\nobjective:\n  aggregation: balanced\ntask:\n  name: arith\n  options: {max_terms: 3}\n")
    cfg = load_config(p, ["objective.clip_high=0.06", "objective.dual_clip=none"])
    assert cfg.objective.ratio == "cumulative" and cfg.objective.clip_low == 0.025
    assert cfg.objective.clip_high == 0.06 and cfg.objective.dual_clip is None
    assert cfg.objective.aggregation == "balanced" and cfg.task.options == {"max_terms": 3}
    assert config_from_dict(cfg.to_dict()) == cfg


def test_bad_yaml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("objective: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    bad.write_text("objective:\n  bogus: 1\n")
    with pytest.raises(ConfigError, match="unknown config key 'objective.bogus'"):
        load_config(bad)


def test_yaml_booleans_in_string_settings(tmp_path):
    """YAML reads an unquoted `no` / `on` as a boolean: sft.enabled takes it as "yes"/"no" and
    task.chat_template as "on"/"off"; elsewhere the error says to quote the value."""
    p = tmp_path / "c.yaml"
    for text, want in (("false", "no"), ("no", "no"), ("true", "yes"), ("'auto'", "auto")):
        p.write_text(f"sft:\n  enabled: {text}\n")
        assert load_config(p).sft.enabled == want
    for text, want in (("on", "on"), ("off", "off"), ("yes", "on"), ("false", "off"), ("auto", "auto")):
        p.write_text(f"task:\n  chat_template: {text}\n")
        assert load_config(p).task.chat_template == want
    p.write_text("objective:\n  aggregation: no\n")
    with pytest.raises(ConfigError, match="quote the value"):
        load_config(p)


def test_every_preset_validates():
    for name in PRESETS:
        assert isinstance(load_config(overrides=[f"preset={name}"]), Config)


def test_cumulative_with_ppo_clip_warns():
    with pytest.warns(UserWarning, match="CTPO's defaults"):
        load_config(overrides=["objective.ratio=cumulative"])


def test_example_and_study_configs_validate():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    examples = sorted((root / "examples").glob("*.yaml"))
    # studies/ also holds sweep design files (a list of runs, not a config)
    studies = [p for p in sorted((root / "studies").glob("*.yaml")) if not p.stem.endswith("_design")]
    assert examples and studies
    for path in examples + studies:
        assert isinstance(load_config(path), Config), path


@pytest.mark.parametrize("key", ["optim.lr", "sft.lr", "objective.kl_coef", "objective.clip_low",
                                 "objective.clip_high", "objective.dual_clip", "rollout.temperature",
                                 "optim.grad_clip", "credit.eps_w", "sft.ema"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_nan_and_inf_are_rejected_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=f"^{key}=.* must be a finite number"):
        load_config(overrides=[f"{key}={value}"])


def test_nan_is_rejected_when_a_config_is_built_directly():
    cfg = Config()
    cfg.optim.lr = float("nan")
    with pytest.raises(ConfigError, match="optim.lr"):
        cfg.validate()


@pytest.mark.parametrize("override, needle", [("trainer.run_dir=", "trainer.run_dir is empty"),
                                              ("trainer.run_dir=  ", "trainer.run_dir is empty"),
                                              ("model.path=", "model.path is empty")])
def test_empty_paths_are_rejected(override, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(overrides=[override])


def test_merge_config_precedence(tmp_path):
    from grpolab.config import merge_config

    base = load_config(overrides=["optim.lr=3e-4", "trainer.steps=10", "rollout.temperature=0.7"])
    f = tmp_path / "more.yaml"
    f.write_text("trainer:\n  steps: 20\noptim:\n  lr: 1.0e-4\n")
    cfg = merge_config(base, f, ["optim.lr=5e-5"])
    assert cfg.trainer.steps == 20  # file over saved
    assert cfg.optim.lr == 5e-5  # --set over file
    assert cfg.rollout.temperature == 0.7  # saved where neither says otherwise
