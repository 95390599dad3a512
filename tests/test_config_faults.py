"""Issue 62, item 4: config inputs that were accepted without a word or ended in a traceback are one
error naming the cause and the fix: class constants as keys, a key given twice, an empty file,
Latin-1 or binary files, malformed YAML inside --set, seeds numpy cannot take, a policy lag the
run never reaches."""

from __future__ import annotations

import pytest

from grpolab.cli import main
from grpolab.config import ConfigError, load_config


@pytest.mark.parametrize("key", ["objective.LOSS_KEYS=[]", "rollout.MAX_ROUNDS=1000", "rollout.MAX_OVERSAMPLE=1"])
def test_class_constants_are_not_config_keys(key):
    with pytest.raises(ConfigError, match="unknown config key"):
        load_config(overrides=[key])


@pytest.mark.parametrize("text,needle", [
    ("trainer:\n  steps: 5\n  steps: 50\n", "the key 'steps' is given twice (line 3); keep one"),
    ("trainer: {steps: 5}\ntrainer: {seed: 1}\n", "the key 'trainer' is given twice"),
    ("", "is empty (no settings)"),
    ("# only a comment\n", "is empty (no settings)"),
    ("trainer: [steps: 5\n", "is not valid YAML"),
])
def test_config_file_faults(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("data", ["trainer:\n  run_dir: runs/caf\xe9\n".encode("latin-1"), b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_files_that_are_not_utf8_text(tmp_path, capsys, data):
    path = tmp_path / "c.yaml"
    path.write_bytes(data)
    capsys.readouterr()
    assert main(["train", "--dry-run", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not UTF-8 text" in err[0] and "save it as UTF-8" in err[0]


@pytest.mark.parametrize("override", ["model.lora={r: 4", "task.options.reward=[math, "])
def test_malformed_yaml_in_set(override):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[override])
    assert "is not valid YAML" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("seed", [-1, 2**32, 10**30])
def test_seeds_out_of_range(seed):
    with pytest.raises(ConfigError, match=r"trainer.seed=.* must be in \[0, 2\*\*32 - 1\]"):
        load_config(overrides=[f"trainer.seed={seed}"])
    load_config(overrides=[f"trainer.seed={2**32 - 1}"])  # the largest one works


def test_policy_lag_beyond_the_run():
    with pytest.raises(ConfigError, match="trainer.policy_lag=10 is not below trainer.steps=10"):
        load_config(overrides=["trainer.steps=10", "trainer.policy_lag=10"])
    load_config(overrides=["trainer.steps=10", "trainer.policy_lag=9"])


@pytest.mark.parametrize("dry", [[], ["--dry-run"]])
def test_odd_head_size(tmp_path, capsys, dry):
    capsys.readouterr()
    assert main(["train", *dry, "--set", "model.hidden_size=33", "--set", "model.num_heads=1",
                 "--set", f"trainer.run_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "= 33 / 1 = 33: the tiny model's head size must be even" in err[0]


@pytest.mark.parametrize("text,needle", [("runs:\n  - {optim.lr: 1e-4\n", "is not valid YAML"),
                                         ("runs:\n  - {optim.lr: 1, optim.lr: 2}\n", "is given twice")])
def test_malformed_design_file(tmp_path, text, needle):
    from grpolab.sweep import load_design

    path = tmp_path / "design.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as e:
        load_design(path)
    assert str(e.value).startswith(f"design file {path}") and needle in str(e.value) and "\n" not in str(e.value)
