"""Issue 62: every environment variable grpolab reads is typed and ranged. A bad value is one
`error:` line naming the variable, the value and the fix, before any work (before torch loads: a
bad OMP_NUM_THREADS was first met by libgomp, which printed `Invalid value` and used every core; a
bad MKL_NUM_THREADS silently left torch one thread; GRPOLAB_MMAP_THRESHOLD=-5 or a value above
glibc's maximum was silently ignored; GRPOLAB_REQUIRE_SANDBOX=false turned the requirement on).
The list (grpolab.utils.envvars.ENV_VARS) is held to the code that reads variables and to the
table of docs/faults.md."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grpolab.errors import ConfigError
from grpolab.utils.envvars import ENV_VARS, INTERNAL, MMAP_THRESHOLD_MAX, check_environment

ROOT = Path(__file__).resolve().parents[2]

BAD = [
    ("OMP_NUM_THREADS", "abc", "not a whole number of threads >= 1"),
    ("OMP_NUM_THREADS", "0", "not a whole number of threads >= 1"),
    ("OMP_NUM_THREADS", "", "not a whole number of threads >= 1"),
    ("MKL_NUM_THREADS", "two", "not a whole number of threads >= 1"),
    ("GRPOLAB_MMAP_THRESHOLD", "-5", "not a whole number of bytes >= 0"),
    ("GRPOLAB_MMAP_THRESHOLD", "128k", "not a whole number of bytes >= 0"),
    ("GRPOLAB_MMAP_THRESHOLD", str(MMAP_THRESHOLD_MAX + 1), "above glibc's largest mmap threshold"),
    ("GRPOLAB_REQUIRE_SANDBOX", "false", "not a switch"),
    ("GRPOLAB_CACHE_DIR", "/etc/hostname", "a file, not a directory"),
    ("MINIWOB_CHROME_BINARY", "/nonexistent/chromium", "no such file"),
]


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in {v.name for v in ENV_VARS} - {"HF_HUB_OFFLINE"}}
    return {**env, "PYTHONPATH": os.pathsep.join(sys.path), **extra}


@pytest.mark.parametrize("name,value,why", BAD)
def test_a_bad_value_is_one_error_line_before_any_work(tmp_path, name, value, why):
    extra = {name: value}
    if name == "MINIWOB_CHROME_BINARY":
        extra["MINIWOB_CHROMEDRIVER"] = "/bin/true"
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", "import sys; from grpolab.cli import main; sys.exit(main())",
                           "train", "--set", f"trainer.run_dir={run}"], env=_clean_env(**extra),
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]  # no libgomp line, no traceback
    var = next(v for v in ENV_VARS if v.name == name)
    assert lines[0] == f"error: environment variable {name}={value!r}: {why}" + lines[0].split(why, 1)[1]
    assert lines[0].endswith(f"; set it to {var.accepts}, or unset it")
    assert not run.exists()  # before any work


@pytest.mark.parametrize("env", [
    {"OMP_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "4,2"}, {"MKL_NUM_THREADS": "2"},
    {"GRPOLAB_MMAP_THRESHOLD": "0"}, {"GRPOLAB_MMAP_THRESHOLD": "131072"},
    {"GRPOLAB_MMAP_THRESHOLD": str(MMAP_THRESHOLD_MAX)}, {"GRPOLAB_REQUIRE_SANDBOX": "1"},
    {"GRPOLAB_REQUIRE_SANDBOX": ""}, {"GRPOLAB_CACHE_DIR": "/nonexistent/cache"}, {"VERL_PLATFORM": "anything"},
    {"MINIWOB_CHROME_BINARY": "/bin/true", "MINIWOB_CHROMEDRIVER": "/bin/true"},
])
def test_good_values_pass(env):
    check_environment(env)


def test_the_browser_variables_go_together():
    with pytest.raises(ConfigError, match="MINIWOB_CHROME_BINARY and MINIWOB_CHROMEDRIVER go together: set "
                                          "MINIWOB_CHROMEDRIVER too"):
        check_environment({"MINIWOB_CHROME_BINARY": "/bin/true"})


def test_the_heap_bound_refuses_a_threshold_glibc_would_ignore(monkeypatch):
    from grpolab.utils.heap import bound_heap

    for value in ("-5", str(MMAP_THRESHOLD_MAX + 1)):
        monkeypatch.setenv("GRPOLAB_MMAP_THRESHOLD", value)
        with pytest.raises(ConfigError, match=f"GRPOLAB_MMAP_THRESHOLD={value!r}"):
            bound_heap()


def _constants(tree: ast.Module) -> dict[str, str]:
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _read_names(path: Path) -> set[str]:
    """The variable names ``path`` reads: ``os.environ.get(X)``, ``os.environ[X]``, ``os.getenv(X)``,
    ``X in os.environ`` (X a string or a module constant)."""
    tree = ast.parse(path.read_text())
    consts, names = _constants(tree), set()
    for node in ast.walk(tree):
        arg = None
        if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute):
            f = node.func
            if (f.attr == "get" and _is_environ(f.value)) or (f.attr == "getenv" and isinstance(f.value, ast.Name)
                                                               and f.value.id == "os"):
                arg = node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value):
            arg = node.slice
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators):
            arg = node.left
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            names.add(arg.value)
        elif isinstance(arg, ast.Name) and arg.id in consts:
            names.add(consts[arg.id])
    return names


def test_every_variable_the_code_reads_is_listed():
    read = set().union(*(_read_names(p) for p in (ROOT / "src" / "grpolab").rglob("*.py")))
    assert {"OMP_NUM_THREADS", "GRPOLAB_MMAP_THRESHOLD", "GRPOLAB_CACHE_DIR"} <= read  # the scan finds them
    assert read - {v.name for v in ENV_VARS} - set(INTERNAL) == set()


def test_docs_table_lists_every_variable():
    text = (ROOT / "docs" / "faults.md").read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([A-Z_]+)` \|", section, flags=re.M)
    assert rows == [v.name for v in ENV_VARS]
