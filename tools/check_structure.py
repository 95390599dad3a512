"""Check the package's structure rules (issue 36; docs/design habits 13-14). CI runs it through
tests/test_structure.py; run it by hand with ``python tools/check_structure.py`` (exit 1 on a
violation, one line per problem).

1. Every function in ``grpolab/train/`` is at most :data:`MAX_FUNCTION_LINES` lines long; every
   function in ``grpolab/objectives/`` at most :data:`MAX_OBJECTIVE_LINES` lines besides its
   docstring (objective docstrings carry every tensor's shape and the paper's equation).
2. No import cycle between the package's modules. Every ``import`` counts, also those inside
   functions (a deferred import hides a cycle from Python, not from the reader); an import of a
   package's name counts as an import of that package's ``__init__``, and a package's
   ``__init__`` importing its own submodules is not a cycle by itself.
3. ``grpolab/cli.py`` imports nothing of grpolab but :mod:`grpolab.commands` (and the version).
4. The commands live in ``grpolab/commands/``: no module outside it defines a ``*_command`` function.
5. Scripts under ``benchmarks/`` and ``studies/`` import the installed package: no ``sys.path``
   edits (a helper two scripts need belongs in the package).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_FUNCTION_LINES = 80
MAX_OBJECTIVE_LINES = 60
PACKAGE = Path(__file__).resolve().parents[1] / "src" / "grpolab"


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


def long_functions(mods, prefix: str = "grpolab.train", limit: int = MAX_FUNCTION_LINES, *,
                   count_docstring: bool = True) -> list[str]:
    out = []
    for m, (path, tree) in mods.items():
        if m != prefix and not m.startswith(prefix + "."):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1 - (0 if count_docstring else _docstring_lines(node))
                if n > limit:
                    what = "lines" if count_docstring else "lines besides its docstring"
                    out.append(f"{path}:{node.lineno} {node.name} is {n} {what} "
                               f"(at most {limit} in {prefix})")
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


def path_edits(scripts: Path) -> list[str]:
    """``sys.path`` changes in the scripts under ``scripts/benchmarks`` and ``scripts/studies``."""
    out = []
    for folder in ("benchmarks", "studies"):
        for p in sorted((scripts / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"), str(p))):
                if (isinstance(node, ast.Attribute) and node.attr in ("insert", "append", "extend")
                        and isinstance(node.value, ast.Attribute) and node.value.attr == "path"
                        and isinstance(node.value.value, ast.Name) and node.value.value.id == "sys"):
                    out.append(f"{p.relative_to(scripts)}:{node.lineno} edits sys.path; import the installed "
                               "package (move a shared helper into it)")
    return out


def problems(root: Path = PACKAGE, scripts: Path | None = None) -> list[str]:
    """Every violation in the package at ``root`` and the scripts of the repository ``scripts``
    (default: the package's repository, when ``root`` is the package)."""
    mods = modules(root)
    out = long_functions(mods)
    out += long_functions(mods, "grpolab.objectives", MAX_OBJECTIVE_LINES, count_docstring=False)
    out += [f"import cycle: {' <-> '.join(c)}" for c in cycles(import_graph(mods))]
    out += cli_imports(mods)
    out += stray_commands(mods)
    if scripts is None and root == PACKAGE:
        scripts = PACKAGE.parents[1]
    if scripts is not None:
        out += path_edits(scripts)
    return out


def main() -> int:
    found = problems()
    for line in found:
        print(line)
    print(f"{len(found)} structure problem(s)" if found else "structure: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
