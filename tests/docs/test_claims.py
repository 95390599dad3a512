"""docs/claims.yaml: every registered number in README.md and docs/ agrees with its committed record, and
every result number in the scanned regions is either registered or listed, line by line, in the ledger
of numbers not yet tied (docs/claims_untied.yaml) (issue 57; the README's other drift checks are in
test_readme_claims.py).

    python tests/docs/test_claims.py --ledger     # rewrite docs/claims_untied.yaml from the docs as they are
    python tests/docs/test_claims.py --count      # numbers found, tied, untied per document
"""

from __future__ import annotations

import functools
import json
import re
import statistics
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_YAML = yaml.safe_load((ROOT / "docs" / "claims.yaml").read_text())
REGISTRY = _YAML["claims"]
SCAN = _YAML["scan"]
#: numbers in a scanned region that are not measurements (settings, targets, thresholds, sizes) and
#: results no committed record holds, said so on the page (each: doc, text, why)
NOT_RESULTS = _YAML.get("not_results") or []
UNBACKED = _YAML.get("unbacked") or []
#: an unbacked snippet tells the reader so in its own words
UNBACKED_WORDS = ("unbacked", "not stored", "no committed record", "stores no per-seed", "does not store")
LEDGER_PATH = ROOT / "docs" / "claims_untied.yaml"

#: a number stated as a result: signed (+7.5, -0.3), a decimal (0.973), or with a unit (85%, 4.8x, 3.34 nats,
#: 270 s, 1.77 GiB, 12 points); not part of a word, a version, a date or an exponent (1e-4)
_UNIT = r"\s?(?:%|x\b|points?\b|nats?\b|s\b|min\b|GiB\b|MiB\b|ms\b)"
RESULT = re.compile(r"(?<![\w.\-/])(?:(?:[+-]\d[\d,]*(?:\.\d+)?|\d*\.\d+(?!\d|\.\d))(?:" + _UNIT + r")?"
                    r"|\d[\d,]*(?:\.\d+)?" + _UNIT + ")")
#: spans whose numbers are not results: code blocks, inline code, link targets, HTML comments
_NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)]*\)|<!--.*?-->", re.S)


def resolve(doc, path: str):
    """The value at ``path`` in ``doc``: keys joined by ".", ``[i]`` a list item, ``[k=v,...]`` the
    list item whose fields equal those values."""
    for part in re.findall(r"\[[^\]]*\]|[^.\[\]]+", path):
        if part.startswith("["):
            inner = part[1:-1]
            if "=" in inner:
                want = dict(kv.split("=", 1) for kv in inner.split(","))
                hits = [x for x in doc if all(str(x.get(k)) == v for k, v in want.items())]
                if len(hits) != 1:
                    raise KeyError(f"{part} matches {len(hits)} items")
                doc = hits[0]
            else:
                doc = doc[int(inner)]
        else:
            doc = doc[part]
    return doc


@functools.lru_cache(maxsize=None)
def _record(path: str):
    return json.loads((ROOT / path).read_text())


def render(claim: dict) -> str:
    record = _record(claim["record"])
    cells = []
    for v in claim["values"]:
        x = resolve(record, v["field"])
        if v.get("op") == "mean":
            x = sum(x) / len(x)
        elif v.get("op") == "median":
            x = statistics.median(x)
        elif "op" in v:
            raise ValueError(f"unknown op {v['op']!r} in claim {claim['id']}")
        if "minus" in v:  # a difference of two fields, e.g. a seed's final minus its start
            x = x - resolve(record, v["minus"])
        if "over" in v:  # a ratio of two fields
            x = x / resolve(record, v["over"])
        if isinstance(x, (int, float)) and not isinstance(x, bool):
            x = x * v.get("scale", 1)
            if v.get("format", ".3f") == "d":
                x = int(round(x))
        cells.append(format(x, v.get("format", ".3f")))
    return claim["text"].format(*cells)


def _flat(s: str) -> str:
    return re.sub(r"\s+", " ", s)


def test_registry_is_well_formed():
    ids = [c["id"] for c in REGISTRY]
    assert len(ids) == len(set(ids)), "claim ids must be unique"
    for c in REGISTRY:
        assert {"id", "doc", "text", "record", "values"} <= set(c), c.get("id")
        assert c["text"].count("{}") == len(c["values"]), c["id"]
        assert c["record"].startswith("docs/results/") and c["record"].endswith(".json"), c["id"]


@pytest.mark.parametrize("claim", REGISTRY, ids=[c["id"] for c in REGISTRY])
def test_claim_agrees_with_its_record(claim):
    assert (ROOT / claim["record"]).exists(), f"{claim['id']}: record {claim['record']} is missing"
    text = render(claim)
    doc = _flat((ROOT / claim["doc"]).read_text())
    assert _flat(text) in doc, (f"{claim['id']}: {claim['doc']} does not say {text!r} (the record "
                                f"{claim['record']} gives these numbers): fix the page or the registry")


def test_resolve_and_render_on_a_hand_record(tmp_path):
    rec = {"rows": [{"d": "normal", "n": 3, "cov": 0.9461}, {"d": "normal", "n": 5, "cov": 0.9502}],
           "v": {"a.b": 1}, "xs": [0.1, 0.2, 0.6]}
    assert resolve(rec, "rows[d=normal,n=5].cov") == 0.9502
    assert resolve(rec, "rows[1].n") == 5 and resolve(rec, "xs[2]") == 0.6
    with pytest.raises(KeyError, match="matches 2 items"):
        resolve(rec, "rows[d=normal].cov")
    (tmp_path / "r.json").write_text(json.dumps(rec))
    claim = {"id": "x", "record": str(tmp_path / "r.json"), "text": "{} and {} ({})",
             "values": [{"field": "rows[n=3].cov", "scale": 100, "format": "+.1f"},
                        {"field": "xs", "op": "mean", "format": ".2f"}, {"field": "rows[0].n", "format": "d"}]}
    assert render(claim) == "+94.6 and 0.30 (3)"
    claim = {"id": "y", "record": str(tmp_path / "r.json"), "text": "{} / {}",
             "values": [{"field": "xs", "op": "median", "over": "rows[0].cov", "format": ".4f"},
                        {"field": "rows[1].cov", "minus": "rows[0].cov", "scale": 100, "format": "+.2f"}]}
    assert render(claim) == "0.2114 / +0.41"  # 0.2 / 0.9461; (0.9502 - 0.9461) x 100


def test_unbacked_numbers_are_gone():
    """Issue 57: numbers with no committed record were removed or marked unbacked."""
    scale_out = (ROOT / "docs" / "scale-out.md").read_text()
    assert "3.99 s" not in scale_out and "4.12 s" not in scale_out
    helps = (ROOT / "docs" / "when-grpo-helps.md").read_text()
    assert "about 3 minutes on 2 CPU cores" not in helps and "solves 0.320 greedily" not in helps
    readme = (ROOT / "README.md").read_text()
    assert "+7.0 points [+4.7, +8.6]" not in readme and "excluding 0" not in readme
    assert "no longer rebuilds" in readme


# --- every result number is registered or in the ledger --------------------------------------------

def _docs() -> list[tuple[str, str]]:
    """(document, region) for every document :data:`SCAN` names (globs expanded; a document named twice
    keeps its first region)."""
    out: dict[str, str] = {}
    for entry in SCAN:
        for path in sorted(ROOT.glob(entry["doc"])):
            out.setdefault(str(path.relative_to(ROOT)), entry["region"])
    return list(out.items())


def _region_end(text: str, region: str) -> int:
    if region == "all":
        return len(text)
    if region == "headline":  # the page's title and summary: everything above its first "## " heading
        m = re.search(r"^## ", text, re.M)
        return m.start() if m else len(text)
    raise ValueError(f"unknown scan region {region!r} in docs/claims.yaml (all, headline)")


def result_numbers(text: str, region: str) -> list[re.Match]:
    """The result numbers of ``text`` in ``region``, outside code, link targets and comments."""
    prose = _NOT_PROSE.sub(lambda m: " " * len(m.group()), text[:_region_end(text, region)])
    return list(RESULT.finditer(prose))


def _claim_spans(doc: str, text: str) -> list[tuple[int, int]]:
    """Where the registered claims of ``doc`` sit in ``text`` (original offsets; claims match with
    whitespace runs as one space)."""
    flat, index = [], []
    for i, ch in enumerate(text):
        if ch.isspace() and flat and flat[-1] == " ":
            continue
        flat.append(" " if ch.isspace() else ch)
        index.append(i)
    flat_s = "".join(flat)
    spans = []
    for c in UNBACKED:  # a whole section: from its heading to the next heading of its level or above
        if c["doc"] == doc and "heading" in c:
            spans.append(_section(text, c["heading"]))
    for c in [*REGISTRY, *NOT_RESULTS, *[u for u in UNBACKED if "text" in u]]:
        if c["doc"] != doc:
            continue
        try:
            want = _flat(render(c) if "record" in c else c["text"])
        except (KeyError, FileNotFoundError, IndexError):
            continue  # test_claim_agrees_with_its_record reports it
        start = flat_s.find(want)
        while start >= 0:
            spans.append((index[start], index[start + len(want) - 1] + 1))
            start = flat_s.find(want, start + 1)
    return spans


def _section(text: str, heading: str) -> tuple[int, int]:
    """The span of the section under ``heading`` (an exact heading line) up to the next heading of its
    level or above."""
    m = re.search(r"^" + re.escape(heading) + r"$", text, re.M)
    if not m:
        raise KeyError(f"no heading {heading!r}")
    level = len(heading) - len(heading.lstrip("#"))
    nxt = re.compile(r"^#{1,%d} " % level, re.M).search(text, m.end())
    return m.start(), nxt.start() if nxt else len(text)


def untied(doc: str, region: str) -> list[tuple[int, str, list[str]]]:
    """``(line number, line, numbers)`` for each line of ``doc`` with a result number no claim covers."""
    text = (ROOT / doc).read_text()
    spans = _claim_spans(doc, text)
    by_line: dict[int, list[str]] = {}
    for m in result_numbers(text, region):
        if not any(a <= m.start() and m.end() <= b for a, b in spans):
            by_line.setdefault(text.count("\n", 0, m.start()), []).append(m.group().strip())
    lines = text.split("\n")
    return [(n + 1, lines[n].strip(), nums) for n, nums in sorted(by_line.items())]


def _ledger() -> dict[str, list[str]]:
    data = yaml.safe_load(LEDGER_PATH.read_text()) if LEDGER_PATH.exists() else None
    return {d: list(lines) for d, lines in ((data or {}).get("untied") or {}).items()}


def test_every_result_number_is_registered_or_in_the_ledger():
    """A number added to a scanned region without a claim in docs/claims.yaml fails here; so does an
    edit to a line of the ledger (the ledger lists numbers no record field ties yet, line by line)."""
    ledger = _ledger()
    missing = []
    for doc, region in _docs():
        known = set(ledger.get(doc, []))
        missing += [f"{doc}:{n}: {nums} in {line[:120]!r}" for n, line, nums in untied(doc, region)
                    if line not in known]
    assert not missing, ("result numbers with no claim in docs/claims.yaml (tie each to its record's field, "
                         "or remove it if no record holds it):\n" + "\n".join(missing[:40]))


def test_ledger_lists_only_lines_that_still_hold_untied_numbers():
    """Tying a number removes its line from the ledger (the ledger only shrinks by tying or removing)."""
    ledger = _ledger()
    current = {doc: {line for _, line, _ in untied(doc, region)} for doc, region in _docs()}
    stale = [f"{doc}: {line[:100]!r}" for doc, lines in ledger.items() for line in lines
             if line not in current.get(doc, set())]
    assert not stale, "ledger lines with no untied number left (python tests/docs/test_claims.py --ledger):\n" + \
        "\n".join(stale[:40])


def test_old_inference_is_gone_from_the_summaries():
    """Issue 57's remainder: no summary keeps a percentile bootstrap over a few seeds or items pooled over
    seeds that share them (each string below was on a page before the re-rendering)."""
    gone = {"README.md": ["each significant\npooled", "3 seeds: 0.357 and 0.324", "RLSD -0.1 [-1.4, +1.2]"],
            "docs/results/README.md": ["pooled p <= 0.005", "+5.8 points [+3.6, +7.7]", "(-0.9 [-3.9, +2.0])",
                                       "RLSD +2.0 [-0.9, +6.4]", "+7.0 [+2.3, +10.9]"],
            "docs/when-grpo-helps.md": ["+0.070 [+0.047, +0.086]", "bootstrap CI over the 3 seeds"],
            "docs/results/ratio_long.md": ["interval clear of zero"],
            "docs/results/ratio.md": ["GSPO -0.8 [-2.7, +1.7]"]}
    for doc, strings in gone.items():
        text = (ROOT / doc).read_text()
        for old in strings:
            assert old not in text, f"{doc} still says {old!r}"


@pytest.mark.parametrize("entry", NOT_RESULTS + UNBACKED,
                         ids=[f"{e['doc']}:{e.get('text', e.get('heading'))[:40]}" for e in NOT_RESULTS + UNBACKED])
def test_not_result_and_unbacked_snippets_are_on_their_pages(entry):
    assert {"doc", "why"} <= set(entry) and ("text" in entry) != ("heading" in entry), entry
    text = (ROOT / entry["doc"]).read_text()
    if "heading" in entry:  # an unbacked section says so in its own text
        a, b = _section(text, entry["heading"])
        said = text[a:b]
    else:
        assert _flat(entry["text"]) in _flat(text), f"{entry['doc']} no longer says {entry['text']!r}: update docs/claims.yaml"
        said = entry["text"]
    if entry in UNBACKED:
        assert any(w in said.lower() for w in UNBACKED_WORDS), \
            f"an unbacked number must say so where it stands ({UNBACKED_WORDS}): {entry}"


def test_result_number_pattern_on_hand_text():
    text = ("GRPO gains +5.8 points [+2.4, +9.2] at lr 1e-4 on 2026-12-01 with torch 2.13.0, 85% of 26, "
            "1.42x faster, 270 s, `--set x=0.5`, [a](b/0.3.md), 3 seeds, 0.973 <!-- 0.1 -->")
    assert [m.group().strip() for m in result_numbers(text, "all")] == [
        "+5.8 points", "+2.4", "+9.2", "85%", "1.42x", "270 s", "0.973"]
    page = "# T\n\nsays 0.5\n\n## Details\n\n0.7\n"
    assert [m.group() for m in result_numbers(page, "headline")] == ["0.5"]


def _count() -> None:
    """Per document: result-like numbers found, tied to a record, marked not a result, marked unbacked,
    and left untied (in the ledger)."""
    global REGISTRY, NOT_RESULTS, UNBACKED
    everything = (REGISTRY, NOT_RESULTS, UNBACKED)
    tot = [0, 0, 0, 0, 0]
    for doc, region in _docs():
        text = (ROOT / doc).read_text()
        found = len(result_numbers(text, region))
        left = []
        for keep in range(4):  # nothing, + claims, + not results, + unbacked
            REGISTRY, NOT_RESULTS, UNBACKED = [x if i < keep else [] for i, x in enumerate(everything)]
            left.append(sum(len(nums) for _, _, nums in untied(doc, region)))
        row = [found, left[0] - left[1], left[1] - left[2], left[2] - left[3], left[3]]
        tot = [a + b for a, b in zip(tot, row)]
        print(f"{doc} ({region}): {row[0]} found, {row[1]} tied, {row[2]} not results, {row[3]} unbacked, "
              f"{row[4]} untied")
    REGISTRY, NOT_RESULTS, UNBACKED = everything
    print(f"all: {tot[0]} found, {tot[1]} tied, {tot[2]} not results, {tot[3]} unbacked, {tot[4]} untied")


def _write_ledger() -> None:
    out = {"untied": {doc: [line for _, line, _ in rows] for doc, region in _docs()
                      if (rows := untied(doc, region))}}
    head = ("# Result numbers in the scanned regions of docs/claims.yaml that no claim ties to a record yet, by\n"
            "# document, one line of the document each (tests/docs/test_claims.py). Tie a number by adding its\n"
            "# claim to docs/claims.yaml, or remove it where no record holds it; then rewrite this file with\n"
            "#   python tests/docs/test_claims.py --ledger\n")
    LEDGER_PATH.write_text(head + yaml.safe_dump(out, sort_keys=False, allow_unicode=True, width=10_000))


if __name__ == "__main__":
    {"--ledger": _write_ledger, "--count": _count}[sys.argv[1]]()
