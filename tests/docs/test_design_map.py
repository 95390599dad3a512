"""docs/design.md is the map of the package: every package and top-level module of src/grpolab is
named in its layout, the entry opening with the module's docstring's first line, and its table of
import rules equals tools/check_structure.py's LEAVES, NO_UPWARD and IMPORTED_ONLY_BY."""

import ast
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "grpolab"
DESIGN = ROOT / "docs" / "design.md"
spec = importlib.util.spec_from_file_location("check_structure", ROOT / "tools" / "check_structure.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def _norm(text: str) -> str:
    return " ".join(text.split())


def layout_entries(text: str) -> dict[str, str]:
    """``{"rollout/" or "runs.py": the entry's text}`` of the ``src/grpolab/`` block of the layout."""
    block = text.split("## The layout", 1)[1].split("```", 2)[1]
    entries: dict[str, list[str]] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"^  (\S+(?:/|\.py))\s+(.*)$", line)
        if m:
            current = m.group(1)
            entries[current] = [m.group(2)]
        elif re.match(r"^\S", line):      # the next top-level folder (tests/, benchmarks/, ...)
            current = None
        elif current and line.strip():
            entries[current].append(line.strip())
    return {k: _norm(" ".join(v)) for k, v in entries.items()}


def summary(path: Path) -> str:
    """A module's docstring's first line, without a leading ``grpolab.<name>: ``."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, f"{path} has no docstring"
    return _norm(re.sub(r"^grpolab(\.\w+)?: ", "", doc.splitlines()[0]))


def rooms(root: Path = PACKAGE) -> dict[str, Path]:
    out = {p.parent.name + "/": p for p in root.glob("*/__init__.py")}
    out.update({p.name: p for p in root.glob("*.py")})
    return out


def map_problems(text: str, root: Path = PACKAGE) -> list[str]:
    entries, out = layout_entries(text), []
    for name, path in sorted(rooms(root).items()):
        if name not in entries:
            out.append(f"{name} is not in the layout")
        elif not entries[name].startswith(summary(path)):
            out.append(f"{name}: the entry should open with {summary(path)!r}")
    out += [f"{name} is in the layout but not in the package" for name in sorted(set(entries) - set(rooms(root)))]
    return out


def import_rules(text: str) -> tuple[dict, dict, dict]:
    """``(leaves, no_upward, imported_only_by)`` from the table of docs/design.md's "Import rules"."""
    section = text.split("## Import rules", 1)[1].split("\n## ", 1)[0]
    leaves, banned, side = {}, {}, {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        module, targets = cells[1].strip("`"), tuple(re.findall(r"`([\w.]+)`", cells[2]))
        {"leaf: may import only": leaves, "must not import": banned, "imported only by": side}[cells[0]][module] = targets
    return leaves, banned, side


def test_every_package_and_top_level_module_is_on_the_map_with_its_docstring():
    assert map_problems(DESIGN.read_text(encoding="utf-8")) == []


def test_the_import_rules_stated_are_the_rules_checked():
    leaves, banned, side = import_rules(DESIGN.read_text(encoding="utf-8"))
    assert leaves == check.LEAVES
    assert banned == check.NO_UPWARD
    assert side == check.IMPORTED_ONLY_BY


def test_the_map_names_the_preflight():
    text = DESIGN.read_text(encoding="utf-8")
    assert "measure/" in layout_entries(text) and "preflight" in layout_entries(text)["measure/"]


def test_a_missing_room_a_stale_summary_and_a_wrong_rule_are_found(tmp_path):
    pkg = tmp_path / "grpolab"
    (pkg / "measure").mkdir(parents=True)
    (pkg / "measure" / "__init__.py").write_text('"""grpolab.measure: measuring a model."""\n')
    (pkg / "runs.py").write_text('"""One door into a run."""\n')
    (pkg / "new.py").write_text('"""A new room."""\n')
    text = ("## The layout\n\n```\nsrc/grpolab/\n  measure/   measuring a model.\n"
            "  runs.py    Two doors into a run.\n  gone.py    Removed.\ntests/  mirrors\n```\n")
    assert map_problems(text, pkg) == [
        "new.py is not in the layout",
        "runs.py: the entry should open with 'One door into a run.'",
        "gone.py is in the layout but not in the package"]
    wrong = ("## Import rules\n\n| rule | module | grpolab modules |\n|---|---|---|\n"
             "| must not import | `grpolab.measure` | `grpolab.commands` |\n")
    assert import_rules(wrong)[1] != check.NO_UPWARD
