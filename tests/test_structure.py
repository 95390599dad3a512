"""tools/check_structure.py holds for the package (function length in train/ and objectives/, no import cycle, the CLI
imports only grpolab.commands, commands live in commands/, scripts do not edit sys.path), and it really finds each kind of fault
in a small package written here."""

import importlib.util
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "check_structure.py"
spec = importlib.util.spec_from_file_location("check_structure", TOOL)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_the_package_keeps_its_structure():
    assert check.problems() == []


def _package(tmp_path, files: dict[str, str]) -> Path:
    root = tmp_path / "grpolab"
    for name, text in {"__init__.py": "", "cli.py": "from grpolab.commands import x\n",
                       "commands/__init__.py": "", "train/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    return root


def test_a_clean_package_passes(tmp_path):
    root = _package(tmp_path, {"train/a.py": "from grpolab.train import b\n", "train/b.py": "import os\n"})
    assert check.problems(root) == []


def test_a_cycle_through_a_deferred_import_is_found(tmp_path):
    root = _package(tmp_path, {"train/a.py": "from grpolab.train.b import f\n",
                               "train/b.py": "def f():\n    from grpolab.train import a\n"})
    assert check.problems(root) == ["import cycle: grpolab.train.a <-> grpolab.train.b"]


def test_a_relative_import_cycle_is_found(tmp_path):
    root = _package(tmp_path, {"train/a.py": "from .b import f\n", "train/b.py": "from . import a\n"})
    assert check.problems(root) == ["import cycle: grpolab.train.a <-> grpolab.train.b"]


def test_a_long_function_in_train_is_found_but_not_elsewhere(tmp_path):
    body = "def long():\n" + "    x = 1\n" * 80            # 81 lines
    root = _package(tmp_path, {"train/a.py": body, "rollout/a.py": body})
    assert check.problems(root) == ["grpolab/train/a.py:1 long is 81 lines (at most 80 in grpolab.train)"]
    ok = _package(tmp_path / "ok", {"train/a.py": "def short():\n" + "    x = 1\n" * 79})
    assert check.problems(ok) == []


def test_a_long_objective_function_is_found_not_counting_its_docstring(tmp_path):
    doc = '    """Shapes.\n\n' + "    x: [B,T]\n" * 30 + '    """\n'
    body = "def loss():\n" + doc + "    x = 1\n" * 60              # 61 lines besides the docstring
    root = _package(tmp_path, {"objectives/a.py": body})
    assert check.problems(root) == [
        "grpolab/objectives/a.py:1 loss is 61 lines besides its docstring (at most 60 in grpolab.objectives)"]
    ok = _package(tmp_path / "ok", {"objectives/a.py": "def loss():\n" + doc + "    x = 1\n" * 59})
    assert check.problems(ok) == []


def test_the_cli_importing_the_library_and_a_stray_command_are_found(tmp_path):
    root = _package(tmp_path, {"cli.py": "def f():\n    from grpolab.train.loop import train\n",
                               "train/headroom.py": "def headroom_command():\n    pass\n"})
    assert check.problems(root) == [
        "grpolab/cli.py:2 imports grpolab.train.loop; the CLI imports only grpolab.commands",
        "grpolab/train/headroom.py:1 defines headroom_command; commands live in grpolab/commands/"]


def test_a_script_editing_sys_path_is_found(tmp_path):
    root = _package(tmp_path / "src", {})
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.py").write_text("import sys\nsys.path.insert(0, 'src')\n")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "s.py").write_text("import sys\nprint(sys.path)\n")          # reading it is fine
    assert check.problems(root, scripts=tmp_path) == [
        "benchmarks/b.py:2 edits sys.path; import the installed package (move a shared helper into it)"]
