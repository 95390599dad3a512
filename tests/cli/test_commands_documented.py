"""Issue 62, item 6: docs/index.md lists every `grpolab` command (it omitted `preflight`), and the TRL
example without TRL installed names its pip line (it was a bare ModuleNotFoundError)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from grpolab.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _commands() -> list[str]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, parser in sub.choices.items():
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        out += [f"{name} {n}" for a in nested for n in a.choices] if nested else [name]
    return out


def test_docs_index_lists_every_command():
    text = (ROOT / "docs" / "index.md").read_text()
    missing = [c for c in _commands() if f"`{c}`" not in text]
    assert "preflight" in _commands() and not missing, missing


def test_trl_example_without_trl_names_its_pip_line(monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("trl_example", ROOT / "examples" / "trl_smollm2_sums.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` fails as when it is not installed
    assert example.main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: this example needs TRL") and 'pip install -e ".[trl]"' in err[0]


def test_preflight_out_that_is_a_file_is_refused_before_measuring(tmp_path, capsys):
    import time

    from grpolab.cli import main

    out = tmp_path / "taken"
    out.write_text("mine\n")
    t0 = time.time()
    capsys.readouterr()
    assert main(["preflight", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {str(out)!r} is a file, not a directory" in err[0]
    assert out.read_text() == "mine\n" and time.time() - t0 < 30  # nothing measured
