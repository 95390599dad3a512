"""`grpolab config [SECTION]` lists every key with its default, allowed values and meaning;
`grpolab train --dry-run` prints the resolved config and runs nothing."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from grpolab.cli import main
from grpolab.config import CHOICES, Config, ConfigError, load_config
from grpolab.config_help import KEY_HELP


def _all_keys():
    c = Config()
    return [f"{s.name}.{g.name}" for s in dataclasses.fields(c) for g in dataclasses.fields(getattr(c, s.name))]


def test_every_key_has_a_help_line_and_no_line_is_stale():
    keys = _all_keys()
    assert sorted(set(keys) - set(KEY_HELP)) == []
    assert sorted(set(KEY_HELP) - set(keys)) == []
    assert all(meaning for _, meaning in KEY_HELP.values())


def test_config_lists_every_key_with_its_default(capsys):
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    sections: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        if line and not line.startswith(" "):
            current = sections.setdefault(line.rstrip(":"), {})
        elif line.startswith("  "):
            name, rest = line.strip().split(" = ", 1)
            current[name] = rest
    c = Config()
    for key in _all_keys():
        sec, name = key.split(".")
        rest = sections[sec].pop(name)
        default = getattr(getattr(c, sec), name)
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            assert rest.startswith(f"{default}  ["), (key, rest)
        assert rest.endswith(KEY_HELP[key][1]), (key, rest)
    assert all(not rest for rest in sections.values())  # every key exactly once
    assert "  prompts_per_step = 32  [int, > 0]" in out
    assert "  aggregation = token  [one of: " in out


def test_config_of_one_section(capsys):
    assert main(["config", "objective"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("objective:\n") and "rollout:" not in out
    assert "  overlong_buffer = 0.0  [number, 0, a share in (0, 1), or whole tokens >= 1]" in out
    assert "  kl_estimator = k3  [one of: k1, k2, k3]" in out


def test_unknown_section_is_one_error_line(capsys):
    assert main(["config", "rolout"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and "rollout" in err


@pytest.mark.parametrize("key", sorted(k for k in CHOICES if k not in ("model.device", "task.chat_template")))
def test_the_validator_refuses_what_the_listing_does_not_allow(key):
    """The allowed names printed by `grpolab config` are the ones the validator checks."""
    allowed = list(CHOICES[key]())
    with pytest.raises(ConfigError):
        load_config(overrides=[f"{key}=not_a_choice_xyz"])
    value = next(a for a in allowed if a not in ("", "cuda:N"))
    extra = ["rollout.group_size=2"] if key == "objective.aggregation" else []
    if key == "task.name":
        value = "arith"
    if key == "env.name":
        pytest.skip("an environment needs its task (checked by test_env_config_train)")
    if key == "credit.name" and value not in ("grpo",):
        extra += ["trainer.preflight=false"]
    load_config(overrides=[f"{key}={value}", *extra])


def test_dry_run_prints_the_resolved_config_and_runs_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--dry-run", "--set", "preset=dapo", "--set", f"trainer.run_dir={run}",
                 "--set", "rollout.group_size=4"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# grpolab train --dry-run")
    d = yaml.safe_load(out)
    assert d["rollout"]["dynamic_sampling"] is True and d["rollout"]["group_size"] == 4
    assert d["objective"]["overlong_buffer"] == 0.2
    assert load_config(overrides=[f"{s}.{k}={v}" if not isinstance(v, dict) else f"{s}.{k}={v}"
                                  for s, sec in d.items() for k, v in sec.items()
                                  if not isinstance(v, dict)]).to_dict() == d
    assert not run.exists()


def test_dry_run_still_refuses_a_bad_config(capsys, tmp_path):
    assert main(["train", "--dry-run", "--set", "rollout.temperature=0"]) == 2
    assert capsys.readouterr().err.startswith("error: rollout.temperature")
