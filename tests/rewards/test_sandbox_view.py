"""Issue 34, findings 1 and 2: the programs' filesystem view, and what the judge imports.

Tried as an attacker would, in both modes (root, and an ordinary user in a user namespace), on a
server whose interpreter is a virtual environment under /tmp -- a world-writable folder whose
site-packages a program's private /tmp used to shadow with a writable copy. Each attack below
scored 1.0 on the main branch before the fix (the honest numpy program scored 0.0 there):

1. a planted ``zz_evil.py`` in the shadowed site-packages plus a module global ``zz_evil``: the
   judge imported it, and the module marked every test passed from ``_judge``'s frame;
   the same with ``msvcrt.py`` and ``msvcrt = 0`` (a stdlib name absent on Linux), and with a
   planted ``numpy/__init__.py`` that the test's own ``import numpy`` picked up;
2. answers read from a world-readable file of the project (the whole tree was visible).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from grpolab.rewards import SandboxLimits
from grpolab.rewards.sandbox import SandboxError, SandboxPool

SYSTEM_PYTHON = "/usr/bin/python3"
UNPRIVILEGED_UID = 4242  # as tests/rewards/conftest.py's unprivileged_server


def missing_isolation(what: str) -> None:
    """Skip -- or fail under GRPOLAB_REQUIRE_SANDBOX=1 (as conftest.missing_isolation)."""
    from grpolab.rewards.sandbox import isolation_required

    if isolation_required():
        pytest.fail(f"{what} (GRPOLAB_REQUIRE_SANDBOX is set: missing isolation is a failure)")
    pytest.skip(what)


def _make_venv(base_python: str) -> Path:
    """A virtual environment under /tmp (world-writable) holding numpy as an installed
    package (linked from this interpreter's site-packages)."""
    root = Path(tempfile.mkdtemp(prefix="grpolab-venv-", dir="/tmp"))
    root.chmod(0o755)
    venv = root / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    import numpy

    np_dir = Path(numpy.__file__).parent
    for name in ("numpy", "numpy.libs"):
        if (np_dir.parent / name).exists():
            (site / name).symlink_to(np_dir.parent / name)
    return venv


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def venv_server(request):
    """``(pool, site-packages path)``: a sandbox pool whose interpreter is a venv under /tmp."""
    user = "auto"
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("the root mode needs root")
        venv = _make_venv(os.path.realpath(sys._base_executable))
    else:
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            missing_isolation(f"needs {SYSTEM_PYTHON} for a venv of another user")
        venv = _make_venv(SYSTEM_PYTHON)
        if os.geteuid() == 0:
            user = UNPRIVILEGED_UID
    site = str(next(venv.glob("lib/python3*/site-packages")))
    server = SandboxPool(size=1, python=str(venv / "bin" / "python"), user=user)
    feats = server.features()
    needed = {"mountns", "readonly_fs", "private_dirs", "pidns", "seccomp"}
    if not needed <= set(feats):
        server.close()
        shutil.rmtree(venv.parent, ignore_errors=True)
        missing_isolation(f"isolation {sorted(needed - set(feats))} unavailable: "
                          f"{server.notes}")
    yield server, site
    server.close()
    shutil.rmtree(venv.parent, ignore_errors=True)


def _code(server, program, tests, **options):
    import grpolab.rewards.code as code_mod

    original = code_mod.POOL
    code_mod.POOL = server
    try:
        return code_mod.code_reward(program, tests, **options)
    finally:
        code_mod.POOL = original


#: Imported in the judge, this marks every test passed from _judge's own frame.
EVIL = r'''
import os, sys
f = sys._getframe()
while f is not None and f.f_code.co_name != "_judge":
    f = f.f_back
if f is not None:
    f.f_locals["mark"](-1, "LOADED")
    for i in range(len(f.f_locals["tests"])):
        f.f_locals["mark"](i, "PASS")
    os._exit(0)
'''

#: Judge-path tests (not of the fast path's shape) that a wrong ``add`` fails.
JUDGE_TESTS = ["r = add(1, 2)\nassert r == 3", "r = add(20, 22)\nassert r == 42"]


def _planting(site: str, files: dict[str, str], extra: str) -> str:
    """A program with a wrong ``add`` that plants ``files`` in every writable place it can
    name: the shadowed site-packages and each entry of its own sys.path."""
    return f'''
import os, sys, types
for d in [{site!r}] + [p for p in sys.path if p]:
    for name, text in {files!r}.items():
        try:
            path = os.path.join(d, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        except OSError:
            pass
{extra}
def add(a, b):
    return 0
'''


@pytest.mark.parametrize("files, extra, tests", [
    ({"zz_evil.py": EVIL}, "zz_evil = types.ModuleType('zz_evil')", JUDGE_TESTS),
    ({"msvcrt.py": EVIL}, "msvcrt = 0", JUDGE_TESTS),
    ({"numpy/__init__.py": EVIL}, "", ["import numpy\n" + t for t in JUDGE_TESTS]),
], ids=["module-global", "stdlib-name", "test-imports-numpy"])
def test_a_planted_module_never_runs_in_the_judge(venv_server, files, extra, tests):
    server, site = venv_server
    res = _code(server, _planting(site, files, extra), tests)
    assert res.score == 0.0, res.info
    assert res.info["passed"] == 0 and res.info["loaded"], res.info


def test_an_honest_numpy_program_scores_1_from_the_allow_list(venv_server):
    server, site = venv_server
    if "numpy" not in server.packages:
        missing_isolation(f"numpy is not importable by this server's interpreter: {server.packages}")
    program = "import numpy as np\ndef add(a, b):\n    return int(np.add(a, b))\n"
    tests = JUDGE_TESTS + ["assert np.__name__ == 'numpy'\nassert add(2, 2) == 4"]
    res = _code(server, program, tests)
    assert res.score == 1.0, res.info
    r = server.run("import numpy, sys\nprint(numpy.__file__)\nprint(sys.path[-1])", "",
                   SandboxLimits(timeout_s=10.0))
    assert r.stdout == "/sandbox/packages/numpy/__init__.py\n/sandbox/packages\n", r.stderr


def test_honest_programs_importing_the_standard_library_score_1(venv_server):
    server, _ = venv_server
    program = ("import fractions, statistics, collections, decimal, json, math as m\n"
               "def half():\n    return float(fractions.Fraction(1, 2))\n"
               "def mean(xs):\n    return statistics.mean(xs)\n"
               "def count(s):\n    return dict(collections.Counter(s))\n"
               "def dbl(s):\n    return str(decimal.Decimal(s) * 2)\n")
    tests = ["assert half() == float(fractions.Fraction(1, 2))",  # the program's imports
             "assert m.isclose(mean([1, 2, 4]), 7 / 3)",
             "assert count('aab') == {'a': 2, 'b': 1}",
             "assert json.dumps(count('a')) == '{\"a\": 1}'",
             "assert dbl('1.5') == str(decimal.Decimal('3.0'))"]
    res = _code(server, program, tests)
    assert res.score == 1.0, res.info


def test_answers_on_the_host_cannot_be_read(venv_server, host_dir):
    server, _ = venv_server
    answers = host_dir / "answers.json"
    answers.write_text(json.dumps({"1,2": 3, "20,22": 42}))
    answers.chmod(0o644)
    host_dir.chmod(0o755)
    here = Path(__file__).resolve()
    program = f'''
import json, re
ANSWERS = json.load(open({str(answers)!r}))
def add(a, b):
    return ANSWERS["%d,%d" % (a, b)]
'''
    res = _code(server, program, ["assert add(1, 2) == 3", "assert add(20, 22) == 42"])
    assert res.score == 0.0 and "FileNotFoundError" in " ".join(res.info["failures"]), res.info
    # the project's own test files (where `add(a, b) == c` pairs were scraped from) neither
    src = f'''
import os
for p in ({str(here)!r}, {str(here.parents[2] / "pyproject.toml")!r}, "/etc/hostname",
          "/etc/passwd", "/root/.bashrc", "/root/.cache", "/home", "/work", "/var", "/run",
          "/opt", "/usr/share", "/usr/bin/env"):
    print(p, os.path.exists(p))
'''
    r = server.run(src, "", SandboxLimits(timeout_s=5.0))
    assert r.returncode == 0, r.stderr
    assert all(line.endswith(" False") for line in r.stdout.splitlines()), r.stdout


WALK = r'''
import json, os, sys
files, dirs = [], []
for root, ds, fs in os.walk("/"):
    if root == "/proc":  # the sandbox's own procfs: its own process only, no host file
        ds[:] = []
        continue
    if root in sys.path or root.startswith("/sandbox/packages/"):
        ds[:] = []
        dirs.append(root)
        continue
    for f in fs:
        files.append(os.path.join(root, f))
print(json.dumps({"files": files, "dirs": dirs, "path": sys.path, "exe": sys.executable}))
'''


def test_the_view_holds_only_the_interpreter_and_its_libraries(venv_server):
    server, site = venv_server
    assert "minimal_fs" in server.features(), server.notes
    r = server.run(WALK, "", SandboxLimits(timeout_s=10.0))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # imports resolve only in the standard library and the allow-list; never in /tmp
    assert not any(p.startswith("/tmp") for p in out["path"]), out["path"]
    assert all("site-packages" not in p for p in out["path"]), out["path"]
    for f in out["files"]:
        ok = (f in ("/etc/ld.so.cache", "/etc/localtime", out["exe"])
              or f in ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
              or ".so" in os.path.basename(f)  # shared libraries the interpreter needs
              or f.startswith(("/usr/lib/locale/", "/usr/lib/x86_64-linux-gnu/gconv/")))
        assert ok, f"{f} is in the programs' view"
    assert not os.path.exists(os.path.join(site, "zz_evil.py"))  # nothing reached the host


def test_trusted_module_resolves_only_in_the_trusted_folders(tmp_path, monkeypatch):
    import grpolab.rewards.sandbox.harness as h

    (tmp_path / "zz_evil_mod.py").write_text("raise SystemExit('planted code ran')\n")
    (tmp_path / "msvcrt.py").write_text("raise SystemExit('planted code ran')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert h.trusted_module("zz_evil_mod") is None and "zz_evil_mod" not in sys.modules
    assert h.trusted_module("msvcrt") is None and "msvcrt" not in sys.modules
    assert h.trusted_module("json") is json
    assert h.trusted_module("os.path") is os.path
    assert h.trusted_module("sys") is sys  # built in
    assert h.trusted_module("../etc") is None and h.trusted_module(3) is None


def test_an_allow_list_with_a_bad_name_is_refused():
    with pytest.raises(ValueError, match="top-level module names"):
        SandboxPool(packages=["numpy; rm -rf /"])
    with pytest.raises(ValueError, match="top-level module names"):
        SandboxPool(packages="numpy")


def test_the_default_pool_hides_the_project_too(isolated, host_dir):
    pool, uid = isolated
    from grpolab.rewards import run_sandboxed

    secret = host_dir / ("answers-" + uuid.uuid4().hex)
    secret.write_text("42")
    secret.chmod(0o644)
    r = run_sandboxed(f"import os\nprint(os.path.exists({str(secret)!r}), sorted(os.listdir('/')))",
                      pool=pool, mode="strict")
    exists, listing = r.stdout.split(" ", 1)
    assert exists == "False", r.stderr
    assert not {"home", "work", "var", "run", "opt", "mnt", "srv", "boot"} & set(eval(listing))


def test_later_pools_reuse_the_first_one_s_view():
    from grpolab.rewards.sandbox import runner

    first = SandboxPool(size=1)
    second = SandboxPool(size=1)
    try:
        spec = first.launcher().spec
        assert second.launcher().spec is spec  # computed once per interpreter and allow-list
        r = second.run("import sys\nprint(sys.path)", "", SandboxLimits())
        assert r.stdout == f"{spec['sys_path']}\n", r.stderr
        assert len([k for k in runner._SPECS if k[0] == first.launcher().python]) == 1
    finally:
        second.close()
        first.close()


def test_a_dead_processs_staging_dir_is_swept_and_a_live_ones_kept(tmp_path):
    from grpolab.rewards.sandbox import view

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is free now (reuse within this test is vanishingly unlikely)
    gone = tmp_path / f"{view.VIEW_PREFIX}abc"
    (gone / "usr").mkdir(parents=True)
    (gone / view.OWNER_FILE).write_text(str(dead.pid))
    mine = tmp_path / f"{view.VIEW_PREFIX}def"
    mine.mkdir()
    (mine / view.OWNER_FILE).write_text(str(os.getpid()))
    other = tmp_path / f"{view.VIEW_PREFIX}notapid"
    other.mkdir()
    (other / view.OWNER_FILE).write_text("notapid")
    unowned = tmp_path / f"{view.VIEW_PREFIX}ghi"
    unowned.mkdir()
    assert view.sweep(str(tmp_path)) == [str(gone)]
    assert not gone.exists() and mine.exists() and other.exists() and unowned.exists()


def test_a_pool_stages_its_view_under_its_pid_and_removes_it_on_close():
    from grpolab.rewards.sandbox import view

    pool = SandboxPool(size=1)
    try:
        root = pool.launcher().staged["root"]
    except SandboxError as exc:
        pytest.skip(f"no sandbox here: {exc}")
    assert os.path.basename(root).startswith("grpolab-view-")
    assert str(os.getpid()) not in os.path.basename(root)  # the name shows in mountinfo
    assert open(os.path.join(root, view.OWNER_FILE)).read() == str(os.getpid())
    assert os.path.isdir(root)
    pool.close()
    assert not os.path.exists(root)
