"""The trainer records which sandbox isolation was in force (issue: a degraded sandbox must not
go unnoticed): ``RUN_DIR/sandbox.json``, one log line, a summary line, a warning, and an error
under ``GRPOLAB_REQUIRE_SANDBOX=1``."""

import json

import pytest

import grpolab.rewards as rewards
from grpolab.config import Config, ConfigError
from grpolab.rewards.sandbox import isolation_of
from grpolab.tasks.base import TaskItem
from grpolab.train.report import _sandbox_line
from grpolab.train.setup import record_sandbox_isolation, uses_sandbox

MATH = [TaskItem(prompt="1+1=", reference="2")]
CODE = [TaskItem(prompt="write add", reference="", reward="code")]


def _cfg(env_name="", **options):
    cfg = Config()
    cfg.env.name = env_name
    cfg.env.options = dict(options)
    return cfg


def test_which_runs_execute_untrusted_code():
    assert not uses_sandbox(_cfg(), MATH)
    assert uses_sandbox(_cfg(), CODE)
    assert uses_sandbox(_cfg("tools"), MATH)  # all tools by default, python among them
    assert not uses_sandbox(_cfg("tools", tools=["calc", "sql"]), MATH)
    assert uses_sandbox(_cfg("tool_arith", calc_backend="sandbox"), MATH)
    with_python = [TaskItem(prompt="q", reference="1", meta={"tools": ["python"]})]
    assert uses_sandbox(_cfg("tool_arith"), with_python)
    assert not uses_sandbox(_cfg("tool_arith"), MATH)


def test_a_run_without_untrusted_code_probes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(rewards, "sandbox_isolation", lambda: pytest.fail("probed the sandbox"))
    assert record_sandbox_isolation(_cfg(), MATH, tmp_path, log=lambda s: None) is None
    assert not (tmp_path / "sandbox.json").exists()
    assert _sandbox_line(tmp_path) == []


def test_full_isolation_is_logged_and_written(tmp_path):
    lines = []
    iso = record_sandbox_isolation(_cfg(), CODE, tmp_path, log=lines.append)
    saved = json.loads((tmp_path / "sandbox.json").read_text())
    assert saved["description"] == iso.description and lines == [iso.description]
    assert saved["features"] == list(iso.features) and "seccomp" in saved["description"] + str(saved["missing"])
    if rewards.isolation_required():  # CI: this machine must have full isolation
        assert not iso.degraded and saved["missing"] == []
        assert _sandbox_line(tmp_path) == ["- " + iso.description]
        assert iso.description.startswith("sandbox isolation: full")


def test_degraded_isolation_warns_and_fails_when_required(tmp_path, monkeypatch):
    degraded = isolation_of(("netns", "pidns"), notes=("no user namespaces here",))
    assert degraded.degraded
    monkeypatch.setattr(rewards, "sandbox_isolation", lambda: degraded)
    monkeypatch.delenv("GRPOLAB_REQUIRE_SANDBOX", raising=False)
    with pytest.warns(RuntimeWarning, match="DEGRADED"):
        record_sandbox_isolation(_cfg(), CODE, tmp_path, log=lambda s: None)
    assert json.loads((tmp_path / "sandbox.json").read_text())["degraded"] is True
    assert _sandbox_line(tmp_path)[0].startswith("- **WARNING** sandbox isolation DEGRADED")
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    with pytest.warns(RuntimeWarning), pytest.raises(ConfigError, match="GRPOLAB_REQUIRE_SANDBOX"):
        record_sandbox_isolation(_cfg(), CODE, tmp_path, log=lambda s: None)
