"""Issue 46: settings that bound work (prompt length, dynamic sampling) and config errors that name
where the bad value came from."""

from __future__ import annotations

import pytest

from grpolab.config import ConfigError, load_config, merge_config


def test_prompt_limit_settings_default_and_choices():
    cfg = load_config()
    assert cfg.rollout.max_prompt_tokens == 512 and cfg.rollout.prompt_truncation == "error"
    cfg = load_config(overrides=["rollout.max_prompt_tokens=64", "rollout.prompt_truncation=left"])
    assert (cfg.rollout.max_prompt_tokens, cfg.rollout.prompt_truncation) == (64, "left")
    with pytest.raises(ConfigError, match=r"prompt_truncation='middle'.*error, left, right"):
        load_config(overrides=["rollout.prompt_truncation=middle"])
    with pytest.raises(ConfigError, match=r"max_prompt_tokens=-1 must be >= 0"):
        load_config(overrides=["rollout.max_prompt_tokens=-1"])


@pytest.mark.parametrize("override, bound", [("rollout.dynamic_sampling_rounds=100000", r"in \[1, 64\]"),
                                             ("rollout.dynamic_sampling_oversample=1e6", r"in \[1, 16\]")])
def test_dynamic_sampling_is_bounded(override, bound):
    with pytest.raises(ConfigError, match=bound):
        load_config(overrides=["rollout.dynamic_sampling=true", override])
    # the bounds themselves are accepted
    load_config(overrides=["rollout.dynamic_sampling_rounds=64", "rollout.dynamic_sampling_oversample=16"])


def test_yaml_typo_names_the_file(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("rolout:\n  group_size: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(f) in str(e.value) and "'rolout'" in str(e.value)
    f.write_text("rollout:\n  group_sise: 4\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert str(f) in str(e.value) and "group_sise" in str(e.value)
    with pytest.raises(ConfigError) as e:  # the file merged on a resumed run's config
        merge_config(load_config(), f)
    assert str(f) in str(e.value)


def test_yaml_yes_in_a_number_is_named_as_written(tmp_path):
    f = tmp_path / "run.yaml"
    f.write_text("trainer:\n  seed: yes\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    msg = str(e.value)
    assert "True" not in msg and "yes" in msg and "must be a number" in msg
    f.write_text("log:\n  wandb_project: no\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert "False" not in str(e.value) and "quote" in str(e.value)
