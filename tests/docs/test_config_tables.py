"""The docs' tables of config keys are checked against the keys' fields (grpolab.config_help): every
key a table names exists, and a plain default it states (a number, a word, true/false, "") is the
field's default. (README.md has no such table: it points to `grpolab config`.)"""

import dataclasses
import re
from pathlib import Path

import pytest

from grpolab.config_help import key_fields

ROOT = Path(__file__).resolve().parents[2]
#: page -> (section the table's bare names belong to, keys that are the adapter's own)
PAGES = {"docs/credit.md": ("credit", set()),
         "docs/real-models.md": (None, set()), "docs/scale-out.md": ("credit", {"privileged_key"})}
#: pages whose defaults are another trainer's (verl's), checked for names only
NAMES_ONLY = {"docs/scale-out.md"}
FIELDS = key_fields()


def _tables(text: str):
    """``(header, rows)`` of every markdown table whose header starts with a key column and has a default column."""
    lines, out, i = text.splitlines(), [], 0
    while i < len(lines):
        cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
        if lines[i].startswith("|") and cells and cells[0].startswith("key") and "default" in cells:
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            out.append((cells, rows))
        i += 1
    return out


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _plain(cell: str):
    """The value a plain default cell states, or ``...`` when it is prose."""
    c = cell.strip().strip("`")
    if c in ('""', "''"):
        return ""
    if c in ("true", "false"):
        return c == "true"
    if re.fullmatch(r"-?\d+(\.\d+)?(e-?\d+)?", c):
        return float(c)
    if re.fullmatch(r"[a-z_0-9]+", c) and cell.strip().startswith("`"):
        return c
    return ...


@pytest.mark.parametrize("page", sorted(PAGES))
def test_key_tables_name_real_keys_with_their_defaults(page):
    section, own = PAGES[page]
    tables = _tables((ROOT / page).read_text(encoding="utf-8"))
    checked = 0
    for header, rows in tables:
        prefix = re.search(r"`(\w+)\.`", header[0])
        sec = prefix.group(1) if prefix else section
        for row in rows:
            names = re.findall(r"`([\w.]+)`", row[0])
            if not names:
                continue
            for name in names:
                key = name if "." in name else f"{sec}.{name}"
                if name in own or (not name.count(".") and sec is None):
                    continue
                assert key in FIELDS, f"{page}: the table names {name!r}, which is no config key"
                checked += 1
            if page in NAMES_ONLY or len(names) != 1:
                continue
            key = names[0] if "." in names[0] else f"{sec}.{names[0]}"
            want = _plain(row[header.index("default")])
            if want is not ...:
                got = _default(FIELDS[key])
                assert (float(got) if isinstance(want, float) and not isinstance(got, bool) else got) == want, \
                    f"{page}: {key} default {row[header.index('default')]} in the table, {got!r} on the field"
    assert checked, f"{page}: no config key table found"
