"""Check the package's structure rules (docs/design.md: the layout and habits 6, 13 and 14). CI
runs it through tests/test_structure.py; run it by hand with ``python tools/check_structure.py``
(exit 1 on a violation, one line per problem).

1. Functions stay short: in ``grpolab/train/`` and ``grpolab/rollout/`` (the hot path a newcomer
   reads first) at most :data:`MAX_FUNCTION_LINES` lines, docstring included; in
   ``grpolab/objectives/`` at most :data:`MAX_OBJECTIVE_LINES` lines besides the docstring
   (objective docstrings carry every tensor's shape and the paper's equation); everywhere else
   at most :data:`MAX_FUNCTION_LINES` lines besides the docstring. :data:`LONG_FUNCTIONS` names
   the exemptions, each with its reason.
2. No import cycle between the package's modules. Every ``import`` counts, also those inside
   functions (a deferred import hides a cycle from Python, not from the reader); an import of a
   package's name counts as an import of that package's ``__init__``, and a package's
   ``__init__`` importing its own submodules is not a cycle by itself.
3. ``grpolab/cli.py`` imports nothing of grpolab but :mod:`grpolab.commands` (and the version), and
   declares no command: each command declares its arguments beside its code (a
   :class:`grpolab.commands.base.Command` in its module under ``grpolab/commands/``); the CLI adds
   only its own options (:data:`CLI_OPTIONS`) and builds one subparser per registered command, so an
   ``add_argument`` of anything else, or an ``add_parser`` naming a command, in ``cli.py`` is refused.
4. The commands live in ``grpolab/commands/``: no module outside it defines a ``*_command`` function.
5. Scripts under ``benchmarks/`` and ``studies/`` import the installed package: no ``sys.path``
   edits, and no script loads another file by its path (``importlib.util.spec_from_file_location``,
   ``runpy``) or imports a sibling script: a helper two scripts need belongs in the package.
   :data:`SCRIPT_LOADS` names the loads still to be moved, each with its reason.
6. The leaves import nothing above them: :mod:`grpolab.errors` and ``grpolab/utils/`` import
   nothing of grpolab but each other, ``grpolab/models/`` nothing of the config or the trainer.
   The measuring wing sits below the trainer: ``grpolab/measure/`` never imports
   ``grpolab/train/``, and ``grpolab/rollout/`` (how a run samples and scores) imports neither
   the trainer nor ``grpolab/measure/`` (:data:`NO_UPWARD`).
7. Tests mirror the source (as verl's ``validate_structure.py`` asks): a test file lives in
   ``tests/<name>/`` where ``grpolab/<name>/`` is a package or ``grpolab/<name>.py`` a module
   (subfolders mirror subpackages), in ``tests/<folder>/`` for the repository's own
   :data:`SCRIPT_FOLDERS`, or at the top as ``tests/test_<module>[_*].py`` for a top-level
   module; :data:`TOP_LEVEL_TESTS` names the others.
8. Benchmarks write to one folder: an output a script under ``benchmarks/`` writes when not told
   otherwise (an ``add_argument`` default, a module-level ``*OUT*`` / ``RESULTS*`` constant) lies
   under ``runs/bench/`` through :func:`grpolab.bench.results_path`; a committed record goes to
   ``docs/results/`` only through the ``--out`` its page's command states. :data:`OUTPUT_PENDING`
   names the scripts still to follow, each with its reason.
9. No module only re-exports: a module whose body is nothing but imports, ``__all__`` and its
   docstring, importing something of grpolab, is a forwarding address left by a rename (callers
   import from the real home; the project has never released, so a rename deletes the old name).
   A package's ``__init__`` that re-exports its own submodules (``from .sampler import sample``)
   is the package's front door and is allowed; one that forwards anything else is not
   (:data:`FORWARDS` names the exceptions, each with its reason).
10. The adapters and the benchmark toolkit hang off the side: nothing in the package imports
    ``grpolab/integrations/`` (the benchmark toolkit, which times the TRL adapter, aside) and
    nothing imports ``grpolab/bench/`` (:data:`IMPORTED_ONLY_BY`).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MAX_FUNCTION_LINES = 80
MAX_OBJECTIVE_LINES = 60
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "grpolab"
#: ``module.function`` -> why it may be longer than the rule (keep this list short)
LONG_FUNCTIONS: dict[str, str] = {}
#: the options ``grpolab/cli.py`` declares itself (rule 3); every other argument belongs to a command
CLI_OPTIONS = ("--version", "--debug")
#: repository folders whose tests live in ``tests/<folder>/`` (scripts, pages and tools, not the package)
SCRIPT_FOLDERS = ("benchmarks", "docs", "studies", "tools")
#: script -> why it still loads another file by path (move the helper into the package, then drop the entry)
SCRIPT_LOADS = {
    "benchmarks/speed/objectives.py": "times the float64 loop reference of tests/objectives/reference.py (test code)",
}
#: benchmark script (file name) -> why its default output is not yet under runs/bench/ (rule 8)
OUTPUT_PENDING: dict[str, str] = {}
#: module-level names that hold a script's default output (rule 8)
OUTPUT_NAME = re.compile(r"(^|_)(OUT|OUTPUT|RESULTS?)(_|$)")
#: test files at the top of ``tests/`` that mirror no module
TOP_LEVEL_TESTS = {"test_structure.py": "these rules themselves, run by CI"}
#: package -> why its ``__init__`` forwards a name from outside the package (rule 9; keep it short)
FORWARDS = {
    "grpolab.commands": "ConfigError, which the CLI catches: rule 3 lets grpolab/cli.py import only grpolab.commands",
}
#: leaf modules (prefix) -> the grpolab prefixes they may import
LEAVES = {
    "grpolab.errors": ("grpolab.errors",),
    "grpolab.utils": ("grpolab.utils", "grpolab.errors"),
}
#: module prefix -> the only grpolab prefixes besides itself that may import it (rule 10)
IMPORTED_ONLY_BY = {
    "grpolab.integrations": ("grpolab.bench",),
    "grpolab.bench": (),
}
#: module prefix -> grpolab prefixes it must not import (an upward arrow)
NO_UPWARD = {
    "grpolab.models": ("grpolab.config", "grpolab.train", "grpolab.commands", "grpolab.cli"),
    "grpolab.rollout": ("grpolab.measure", "grpolab.train", "grpolab.commands", "grpolab.cli"),
    "grpolab.measure": ("grpolab.train", "grpolab.commands", "grpolab.cli"),
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = ("grpolab",) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, tuple[Path, ast.Module]]:
    """``{module name: (path relative to the package's parent, syntax tree)}``."""
    return {module_name(p, root): (p.relative_to(root.parent), ast.parse(p.read_text(encoding="utf-8"), str(p)))
            for p in sorted(root.rglob("*.py"))}


def _imported(node: ast.AST, mod: str, is_package: bool, known: set[str]) -> list[str]:
    """The grpolab modules one import statement loads."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "grpolab"]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:  # relative: resolve against this module's package
        base = mod.split(".") if is_package else mod.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    if target.split(".")[0] != "grpolab":
        return []
    out = []
    for a in node.names:
        sub = f"{target}.{a.name}"
        out.append(sub if sub in known else target)  # `from pkg import submodule` loads the submodule
    return out


def import_graph(mods: dict[str, tuple[Path, ast.Module]]) -> dict[str, set[str]]:
    known = set(mods)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, (path, tree) in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            for target in _imported(node, m, is_package, known):
                while target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in known and target != m:
                    if is_package and target.startswith(m + "."):
                        continue  # a package re-exporting its own submodules
                    graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _docstring_lines(node: ast.AST) -> int:
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0].end_lineno - body[0].lineno + 1
    return 0


def _in(m: str, prefix: str) -> bool:
    return m == prefix or m.startswith(prefix + ".")


def long_functions(mods, prefix: str = "grpolab.train", limit: int = MAX_FUNCTION_LINES, *,
                   count_docstring: bool = True, skip: tuple[str, ...] = (),
                   exempt: dict[str, str] | None = None) -> list[str]:
    """Functions of the modules under ``prefix`` (but not under ``skip``) longer than ``limit``."""
    exempt = LONG_FUNCTIONS if exempt is None else exempt
    out = []
    for m, (path, tree) in mods.items():
        if not _in(m, prefix) or any(_in(m, s) for s in skip):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and f"{m}.{node.name}" not in exempt:
                n = node.end_lineno - node.lineno + 1 - (0 if count_docstring else _docstring_lines(node))
                if n > limit:
                    what = "lines" if count_docstring else "lines besides its docstring"
                    out.append(f"{path}:{node.lineno} {node.name} is {n} {what} "
                               f"(at most {limit} in {prefix})")
    return out


def upward_imports(mods) -> list[str]:
    """Imports from a leaf module to anything but its allowed neighbours (:data:`LEAVES`) and the
    upward arrows of :data:`NO_UPWARD`."""
    known, out = set(mods), []
    for m, (path, tree) in mods.items():
        allowed = next((ok for leaf, ok in LEAVES.items() if _in(m, leaf)), None)
        banned = next((no for low, no in NO_UPWARD.items() if _in(m, low)), ())
        for node in ast.walk(tree):
            for target in _imported(node, m, path.name == "__init__.py", known):
                if allowed is not None and not any(_in(target, a) for a in allowed):
                    out.append(f"{path}:{node.lineno} imports {target}; {m} is a leaf "
                               f"(it may import {', '.join(allowed)} only)")
                elif any(_in(target, b) for b in banned):
                    out.append(f"{path}:{node.lineno} imports {target} upward; move what both need down "
                               "(e.g. grpolab.errors)")
    return out


def side_imports(mods) -> list[str]:
    """Imports of :data:`IMPORTED_ONLY_BY`'s packages from anywhere else (rule 10)."""
    known, out = set(mods), []
    for m, (path, tree) in mods.items():
        for node in ast.walk(tree):
            for target in _imported(node, m, path.name == "__init__.py", known):
                side = next((s for s in IMPORTED_ONLY_BY if _in(target, s)), None)
                if side is not None and not _in(m, side) and not any(_in(m, ok) for ok in IMPORTED_ONLY_BY[side]):
                    out.append(f"{path}:{node.lineno} imports {target}; nothing in the package imports {side}"
                               + (f" but {', '.join(IMPORTED_ONLY_BY[side])}" if IMPORTED_ONLY_BY[side] else "")
                               + " (it hangs off the side: move what both need into the library)")
    return out


def test_layout(tests: Path, root: Path = PACKAGE) -> list[str]:
    """Test files that do not mirror the source (rule 7)."""
    top_modules = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    out = []
    for p in sorted(tests.rglob("test_*.py")):
        rel = p.relative_to(tests)
        if len(rel.parts) == 1:
            if rel.name in TOP_LEVEL_TESTS or any(rel.stem == f"test_{m}" or rel.stem.startswith(f"test_{m}_")
                                                  for m in top_modules):
                continue
            out.append(f"tests/{rel} mirrors no top-level module of grpolab; move it to tests/<package>/ "
                       f"(or tests/<{'|'.join(SCRIPT_FOLDERS)}>/ for a script, page or tool)")
            continue
        folders = rel.parts[:-1]
        if folders[0] in SCRIPT_FOLDERS:
            continue
        src = root.joinpath(*folders)
        if not (src.is_dir() or (len(folders) == 1 and src.with_suffix(".py").exists())):
            out.append(f"tests/{rel}: tests/{'/'.join(folders)}/ mirrors nothing in grpolab/; move the file to "
                       "the folder of the package it tests")
    return out


def cli_imports(mods) -> list[str]:
    path, tree = mods["grpolab.cli"]
    bad = []
    for node in ast.walk(tree):
        for target in _imported(node, "grpolab.cli", False, set(mods)):
            if target not in ("grpolab", "grpolab.commands"):
                bad.append(f"{path}:{node.lineno} imports {target}; the CLI imports "
                           "only grpolab.commands")
    return bad


def cli_declarations(mods) -> list[str]:
    """Arguments or commands declared in ``grpolab/cli.py`` (rule 3): an ``add_argument`` of anything but
    :data:`CLI_OPTIONS`, or an ``add_parser`` given a command's name as a string."""
    path, tree = mods["grpolab.cli"]
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if node.func.attr == "add_argument" and (not names or any(n not in CLI_OPTIONS for n in names)):
            what = " ".join(names) or (ast.unparse(node.args[0]) if node.args else "?")
            out.append(f"{path}:{node.lineno} declares the argument {what} in the CLI; a command declares its arguments "
                       "in its own add_arguments, beside its code in grpolab/commands/")
        elif node.func.attr == "add_parser" and names:
            out.append(f"{path}:{node.lineno} declares the command {names[0]} in the CLI; declare it as a Command "
                       "in its module under grpolab/commands/ and list it in grpolab.commands.COMMANDS")
    return out


def stray_commands(mods) -> list[str]:
    out = []
    for m, (path, tree) in mods.items():
        if m == "grpolab.commands" or m.startswith("grpolab.commands."):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_command"):
                out.append(f"{path}:{node.lineno} defines {node.name}; commands live "
                           "in grpolab/commands/")
    return out


def path_edits(scripts: Path, exempt: dict[str, str] | None = None) -> list[str]:
    """``sys.path`` changes, loads of another file by path and imports of a sibling script in the
    scripts under ``scripts/benchmarks`` and ``scripts/studies`` (loads named in ``exempt``,
    default :data:`SCRIPT_LOADS`, pass)."""
    exempt = SCRIPT_LOADS if exempt is None else exempt
    out = []
    for folder in ("benchmarks", "studies"):
        siblings = {p.stem for p in (scripts / folder).rglob("*.py")}
        for p in sorted((scripts / folder).rglob("*.py")):
            rel = p.relative_to(scripts).as_posix()
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
                loads = (isinstance(node, ast.Attribute) and node.attr == "spec_from_file_location") or \
                    (isinstance(node, (ast.Import, ast.ImportFrom)) and any(
                        (a.name if isinstance(node, ast.Import) else (node.module or "")).split(".")[0]
                        in siblings | {"runpy"} for a in node.names))
                if loads and rel not in exempt:
                    out.append(f"{rel}:{node.lineno} loads another script or file by path; move what it "
                               "needs into the package")
                if (isinstance(node, ast.Attribute) and node.attr in ("insert", "append", "extend")
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "path"
                        and isinstance(node.value.value, ast.Name) and node.value.value.id == "sys"):
                    out.append(f"{p.relative_to(scripts)}:{node.lineno} edits sys.path; import the installed "
                               "package (move a shared helper into it)")
    return out


def _names_a_results_folder(expr: ast.AST, consts: dict[str, ast.AST]) -> bool:
    """Whether ``expr`` (its module-level names resolved once) spells a results folder by hand: a
    string with ``results`` in it, and no call of the toolkit's ``results_path`` / ``RESULTS_DIR``."""
    parts = [expr] + [consts[n.id] for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in consts]
    text = " ".join(ast.unparse(x) for x in parts)
    if "results_path" in text or "RESULTS_DIR" in text:
        return False
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "results" in n.value
               for x in parts for n in ast.walk(x))


def output_defaults(scripts: Path, exempt: dict[str, str] | None = None) -> list[str]:
    """Default outputs of the scripts under ``scripts/benchmarks`` that name a results folder by
    hand instead of :func:`grpolab.bench.results_path` (rule 8; files named in ``exempt``,
    default :data:`OUTPUT_PENDING`, pass)."""
    exempt = OUTPUT_PENDING if exempt is None else exempt
    out = []
    for p in sorted((scripts / "benchmarks").rglob("*.py")):
        if p.name in exempt:
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"), str(p))
        consts = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                  for t in node.targets if isinstance(t, ast.Name)}
        found = [(node.lineno, f"{t.id} = ...", node.value) for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and OUTPUT_NAME.search(t.id)]
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                flag = next((a.value for a in node.args if isinstance(a, ast.Constant)), "?")
                found += [(kw.value.lineno, f"{flag}'s default", kw.value) for kw in node.keywords if kw.arg == "default"]
        for line, what, expr in found:
            if _names_a_results_folder(expr, consts):
                out.append(f"{p.relative_to(scripts).as_posix()}:{line} {what} names a results folder by hand; "
                           "default to grpolab.bench.results_path(NAME) (runs/bench/) and write a committed "
                           "record with --out docs/results/...")
    return out


def _forwards_only(node: ast.stmt) -> bool:
    """Whether a module-level statement is an import, the ``__all__`` list or a docstring."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def re_export_only(mods) -> list[str]:
    """Modules whose body only imports and lists ``__all__`` (rule 9); a package ``__init__`` may
    re-export its own submodules."""
    known, out = set(mods), []
    for m, (path, tree) in mods.items():
        if m in FORWARDS or not all(_forwards_only(node) for node in tree.body):
            continue
        is_package = path.name == "__init__.py"
        targets = [t for node in tree.body for t in _imported(node, m, is_package, known)]
        foreign = [t for t in targets if not (is_package and _in(t, m) and t != m)]
        if foreign:
            out.append(f"{path} only re-exports ({', '.join(sorted(set(foreign)))}); import from the real "
                       "home and delete the module" + (" (or the forwarded names)" if is_package else ""))
    return out


def problems(root: Path = PACKAGE, scripts: Path | None = None) -> list[str]:
    """Every violation in the package at ``root`` and the scripts of the repository ``scripts``
    (default: the package's repository, when ``root`` is the package)."""
    mods = modules(root)
    out = long_functions(mods)
    out += long_functions(mods, "grpolab.rollout")
    out += long_functions(mods, "grpolab.objectives", MAX_OBJECTIVE_LINES, count_docstring=False)
    out += long_functions(mods, "grpolab", count_docstring=False,
                         skip=("grpolab.train", "grpolab.rollout", "grpolab.objectives"))
    out += [f"import cycle: {' <-> '.join(c)}" for c in cycles(import_graph(mods))]
    out += upward_imports(mods)
    out += side_imports(mods)
    out += cli_imports(mods)
    out += cli_declarations(mods)
    out += stray_commands(mods)
    out += re_export_only(mods)
    if scripts is None and root == PACKAGE:
        scripts = PACKAGE.parents[1]
    if scripts is not None:
        out += path_edits(scripts)
        if (scripts / "benchmarks").is_dir():
            out += output_defaults(scripts)
        if (scripts / "tests").is_dir():
            out += test_layout(scripts / "tests", root)
    return out


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} structure problem(s)" if found else "structure: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
