"""Issue 56 item 5: each command declares its arguments beside its code (a Command in its module under
grpolab/commands/), the CLI builds its parser from grpolab.commands.COMMANDS, and building it loads no
library (``grpolab --help`` stays fast: no torch)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from grpolab.cli import build_parser
from grpolab.commands import COMMANDS
from grpolab.commands.base import Command


def _all(commands):
    for c in commands:
        yield c
        yield from _all(c.actions)


def test_each_command_declares_its_arguments_beside_its_code():
    for c in _all(COMMANDS):
        if c.actions:
            continue
        module = c.run.__module__
        assert module.startswith("grpolab.commands.") and module != "grpolab.commands.base", (c.name, module)
        assert c.add_arguments.__module__ == module, (c.name, c.add_arguments.__module__, module)


def test_the_parser_lists_the_registered_commands_in_order():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == ["train", "sft", "eval", "preflight", "sweep", "compare", "diagnose", "credit",
                                 "config", "models"]
    assert [c.name for c in COMMANDS] == list(sub.choices)
    models = next(a for a in sub.choices["models"]._actions if isinstance(a, argparse._SubParsersAction))
    assert list(models.choices) == ["import"]


def test_building_the_parser_loads_no_library():
    code = ("import sys\nfrom grpolab.cli import build_parser\nbuild_parser().format_help()\n"
            "print(sorted(m for m in ('torch', 'numpy', 'transformers', 'grpolab.train', 'grpolab.sweep') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_a_command_runs_or_has_actions():
    with pytest.raises(ValueError, match="give either run or actions"):
        Command("x", "help")
    with pytest.raises(ValueError, match="give either run or actions"):
        Command("x", "help", run=lambda args: 0, actions=(Command("y", "help", run=lambda args: 0),))


def test_the_command_line_keeps_the_hugging_face_libraries_offline():
    """docs/faults.md: grpolab sets HF_HUB_OFFLINE and HF_HUB_DISABLE_TELEMETRY for every command (and the
    processes it starts); the tests' conftest sets them too, so this runs in a clean interpreter."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_HUB_")}
    code = ("import os, sys; from grpolab.cli import main; rc = main(['config']); "
            "sys.stderr.write(os.environ.get('HF_HUB_OFFLINE', '-') + os.environ.get('HF_HUB_DISABLE_TELEMETRY', '-'))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr.endswith("11"), r.stderr[-300:]
