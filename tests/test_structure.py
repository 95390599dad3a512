"""tools/check_structure.py holds for the package (function length everywhere, no import cycle, no upward import from a
leaf, the CLI imports only grpolab.commands and declares no command's arguments, commands live in commands/, scripts do not edit sys.path, tests mirror the
source, no module only re-exports), and it really finds each kind of fault in a small package written here."""

import importlib.util
import textwrap
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "check_structure.py"
spec = importlib.util.spec_from_file_location("check_structure", TOOL)
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def test_the_package_keeps_its_structure():
    assert check.problems() == []


def _package(tmp_path, files: dict[str, str], *, own_code: bool = True) -> Path:
    """A small package of ``files``; with ``own_code`` each non-empty module also defines a name after
    its imports, so that only the test of rule 9 writes modules that merely re-export."""
    root = tmp_path / "grpolab"
    for name, text in {"__init__.py": "", "cli.py": "from grpolab.commands import x\n",
                       "commands/__init__.py": "", "train/__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        text = textwrap.dedent(text)
        (root / name).write_text(text + ("\nOWN = 1\n" if own_code and text.strip() else ""))
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


def test_a_long_function_is_found_in_every_package(tmp_path):
    body = "def long():\n" + "    x = 1\n" * 80            # 81 lines
    doc = 'def documented():\n    """Long\n    docstring.\n    """\n' + "    x = 1\n" * 79   # 80 besides it
    root = _package(tmp_path, {"train/a.py": body, "rollout/a.py": body + doc, "runs.py": body + doc})
    assert check.problems(root) == ["grpolab/train/a.py:1 long is 81 lines (at most 80 in grpolab.train)",
                                    "grpolab/rollout/a.py:1 long is 81 lines (at most 80 in grpolab.rollout)",
                                    "grpolab/rollout/a.py:82 documented is 83 lines (at most 80 in grpolab.rollout)",
                                    "grpolab/runs.py:1 long is 81 lines besides its docstring (at most 80 in grpolab)"]
    ok = _package(tmp_path / "ok", {"train/a.py": "def short():\n" + "    x = 1\n" * 79, "runs.py": doc})
    assert check.problems(ok) == []


def test_only_the_named_exemptions_may_be_long(tmp_path):
    body = "def build_parser():\n" + "    x = 1\n" * 90
    mods = check.modules(_package(tmp_path, {"cli.py": "from grpolab.commands import x\n" + body}))
    assert check.long_functions(mods, "grpolab", count_docstring=False,
                                exempt={"grpolab.cli.build_parser": "a reason"}) == []
    assert check.problems(_package(tmp_path / "b", {"cli.py": "from grpolab.commands import x\n" + body})) == [
        "grpolab/cli.py:2 build_parser is 91 lines besides its docstring (at most 80 in grpolab)"]
    assert check.LONG_FUNCTIONS == {}   # none left (build_parser was one until the commands declared their arguments)


def test_an_upward_import_from_a_leaf_is_found(tmp_path):
    root = _package(tmp_path, {"errors.py": "import os\n", "config.py": "from grpolab.errors import E\n",
                               "utils/__init__.py": "", "utils/heap.py": "def f():\n    from grpolab.config import E\n",
                               "utils/io.py": "from grpolab.errors import E\nfrom grpolab.utils import heap\n",
                               "models/__init__.py": "", "models/gguf.py": "from grpolab.config import E\n"})
    assert check.problems(root) == [
        "grpolab/models/gguf.py:1 imports grpolab.config upward; move what both need down (e.g. grpolab.errors)",
        "grpolab/utils/heap.py:2 imports grpolab.config; grpolab.utils.heap is a leaf "
        "(it may import grpolab.utils, grpolab.errors only)"]


def test_measure_importing_the_trainer_and_rollout_importing_measure_are_found(tmp_path):
    root = _package(tmp_path, {"train/loop.py": "from grpolab.measure import preflight\n",
                               "measure/__init__.py": "", "measure/preflight.py": "from grpolab.rollout import ok\n",
                               "measure/evaluate.py": "def f():\n    from grpolab.train.loop import train\n",
                               "rollout/__init__.py": "", "rollout/ok.py": "import torch\n",
                               "rollout/c.py": "from grpolab.measure import evaluate\n",
                               "rollout/d.py": "import grpolab.train\n"})
    assert check.problems(root) == [
        "grpolab/measure/evaluate.py:2 imports grpolab.train.loop upward; move what both need down (e.g. grpolab.errors)",
        "grpolab/rollout/c.py:1 imports grpolab.measure.evaluate upward; move what both need down (e.g. grpolab.errors)",
        "grpolab/rollout/d.py:1 imports grpolab.train upward; move what both need down (e.g. grpolab.errors)"]


def test_tests_that_do_not_mirror_the_source_are_found(tmp_path):
    root = _package(tmp_path / "src", {"runs.py": "", "rollout/__init__.py": "", "rollout/sampler.py": ""})
    tests = tmp_path / "tests"
    for name in ("test_structure.py", "test_runs.py", "test_runs_open.py", "rollout/test_sampler.py",
                 "benchmarks/test_run_diff.py", "cli/test_cli.py", "test_misc.py", "sampling/test_x.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    assert check.problems(root, scripts=tmp_path) == [                 # tests/cli/ mirrors grpolab/cli.py
        "tests/sampling/test_x.py: tests/sampling/ mirrors nothing in grpolab/; move the file to the folder of the "
        "package it tests",
        "tests/test_misc.py mirrors no top-level module of grpolab; move it to tests/<package>/ "
        "(or tests/<benchmarks|docs|studies|tools>/ for a script, page or tool)"]


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
                               "measure/headroom.py": "def headroom_command():\n    pass\n"})
    assert check.problems(root) == [
        "grpolab/cli.py:2 imports grpolab.train.loop; the CLI imports only grpolab.commands",
        "grpolab/measure/headroom.py:1 defines headroom_command; commands live in grpolab/commands/"]


def test_an_import_of_the_side_packages_is_found(tmp_path):
    """Rule 10: nothing imports grpolab/bench/, and only it imports grpolab/integrations/."""
    root = _package(tmp_path, {"integrations/__init__.py": "", "integrations/trl.py": "import os\n",
                               "bench/__init__.py": "from grpolab.integrations import trl\n",
                               "train/loop.py": "def f():\n    from grpolab.integrations.trl import x\n",
                               "runs.py": "import grpolab.bench\n"})
    assert check.problems(root) == [
        "grpolab/runs.py:1 imports grpolab.bench; nothing in the package imports grpolab.bench (it hangs off the "
        "side: move what both need into the library)",
        "grpolab/train/loop.py:2 imports grpolab.integrations.trl; nothing in the package imports "
        "grpolab.integrations but grpolab.bench (it hangs off the side: move what both need into the library)"]


def test_a_command_declared_in_the_cli_is_found(tmp_path):
    """Rule 3: the CLI adds its own options and one subparser per registered command; a command's name or
    arguments written in cli.py again (as build_parser held them all before issue 56) are refused."""
    ok = """\
        from grpolab.commands import COMMANDS
        def build_parser(p, sub):
            p.add_argument("--version", action="version")
            p.add_argument("--debug", action="store_true")
            for c in COMMANDS:
                c.add_arguments(sub.add_parser(c.name, help=c.help))
    """
    assert check.problems(_package(tmp_path, {"cli.py": ok})) == []
    bad = textwrap.dedent(ok) + textwrap.dedent("""\
        def more(sub, n):
            t = sub.add_parser("train", help="RL-train")
            t.add_argument("--resume", metavar="RUN_DIR")
            t.add_argument(n)
    """)
    assert check.problems(_package(tmp_path / "b", {"cli.py": bad})) == [
        "grpolab/cli.py:8 declares the command train in the CLI; declare it as a Command in its module under "
        "grpolab/commands/ and list it in grpolab.commands.COMMANDS",
        "grpolab/cli.py:9 declares the argument --resume in the CLI; a command declares its arguments in its own "
        "add_arguments, beside its code in grpolab/commands/",
        "grpolab/cli.py:10 declares the argument n in the CLI; a command declares its arguments in its own "
        "add_arguments, beside its code in grpolab/commands/"]


def test_a_script_editing_sys_path_is_found(tmp_path):
    root = _package(tmp_path / "src", {})
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "b.py").write_text("import sys\nsys.path.insert(0, 'src')\n")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "s.py").write_text("import sys\nprint(sys.path)\n")          # reading it is fine
    assert check.problems(root, scripts=tmp_path) == [
        "benchmarks/b.py:2 edits sys.path; import the installed package (move a shared helper into it)"]


def test_a_script_loading_another_by_path_is_found(tmp_path):
    root = _package(tmp_path / "src", {})
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "a.py").write_text("def f():\n    return 1\n")
    (tmp_path / "benchmarks" / "b.py").write_text("import a\n")
    (tmp_path / "benchmarks" / "c.py").write_text(
        "import importlib.util\nspec = importlib.util.spec_from_file_location('a', 'benchmarks/a.py')\n")
    (tmp_path / "benchmarks" / "d.py").write_text("import runpy\nfrom grpolab import bench\nimport json\n")
    assert check.problems(root, scripts=tmp_path) == [
        f"benchmarks/{n}.py:{line} loads another script or file by path; move what it needs into the package"
        for n, line in (("b", 1), ("c", 2), ("d", 1))]
    assert set(check.SCRIPT_LOADS) == {"benchmarks/speed/objectives.py"}  # to shrink


def test_a_benchmark_writing_outside_runs_bench_by_default_is_found(tmp_path):
    root = _package(tmp_path / "src", {})
    (tmp_path / "benchmarks" / "speed").mkdir(parents=True)
    (tmp_path / "benchmarks" / "speed" / "ok.py").write_text(
        "from grpolab import bench\nRESULTS = bench.results_path('x.json')\n"
        "ap.add_argument('--out', default=RESULTS)\nap.add_argument('--json', default=str(bench.results_path('y')))\n"
        "ap.add_argument('--signal', default=None, help='docs/results/signal.json')\n"   # a help text is fine
        "SOURCE = 'docs/results/headroom.md'\n")                                            # so is an input
    (tmp_path / "benchmarks" / "speed" / "bad.py").write_text(
        "from pathlib import Path\nDEFAULT_OUT = Path(__file__).parents[1] / 'results' / 'x.json'\n"
        "ap.add_argument('--out', type=Path, default=DEFAULT_OUT)\n"
        "ap.add_argument('--json', default='docs/results/x.json')\n")
    (tmp_path / "benchmarks" / "pending.py").write_text("ap.add_argument('--json', default='docs/results/x.json')\n")
    tail = ("names a results folder by hand; default to grpolab.bench.results_path(NAME) (runs/bench/) and "
            "write a committed record with --out docs/results/...")
    assert check.output_defaults(tmp_path, exempt={"pending.py": "moving"}) == [
        f"benchmarks/speed/bad.py:2 DEFAULT_OUT = ... {tail}", f"benchmarks/speed/bad.py:3 --out's default {tail}",
        f"benchmarks/speed/bad.py:4 --json's default {tail}"]
    assert len(check.output_defaults(tmp_path, exempt={})) == 4
    assert check.OUTPUT_PENDING == {}  # every script follows the rule


def test_a_module_that_only_re_exports_is_found(tmp_path):
    root = _package(tmp_path, {
        "cli.py": "from grpolab.commands import x\nx()\n",
        "objectives/__init__.py": '"""The objectives."""\nfrom .shaping import mask\n__all__ = ["mask"]\n',
        "objectives/shaping.py": "def mask():\n    pass\n",
        "objectives/dapo.py": '"""Old home."""\nfrom grpolab.objectives.shaping import mask\n__all__ = ["mask"]\n',
        "rollout/__init__.py": "from .teacher import score\nfrom grpolab.objectives.shaping import mask\n",
        "rollout/teacher.py": "from grpolab.objectives import shaping\ndef score():\n    return shaping.mask()\n",
        "train/__init__.py": "import os\n",
    }, own_code=False)
    assert check.problems(root) == [
        "grpolab/objectives/dapo.py only re-exports (grpolab.objectives.shaping); import from the real home and "
        "delete the module",
        "grpolab/rollout/__init__.py only re-exports (grpolab.objectives.shaping); import from the real home and "
        "delete the module (or the forwarded names)"]
    assert set(check.FORWARDS) == {"grpolab.commands"}   # short and named: grow it with care
