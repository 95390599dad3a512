"""docs/claims.yaml: every registered number in README.md and docs/ agrees with its committed record
(issue 57; the README's other drift checks are in test_readme_claims.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = yaml.safe_load((ROOT / "docs" / "claims.yaml").read_text())["claims"]


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


def render(claim: dict) -> str:
    record = json.loads((ROOT / claim["record"]).read_text())
    cells = []
    for v in claim["values"]:
        x = resolve(record, v["field"])
        if v.get("op") == "mean":
            x = sum(x) / len(x)
        elif "op" in v:
            raise ValueError(f"unknown op {v['op']!r} in claim {claim['id']}")
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


def test_unbacked_numbers_are_gone():
    """Issue 57: numbers with no committed record were removed or marked unbacked."""
    scale_out = (ROOT / "docs" / "scale-out.md").read_text()
    assert "3.99 s" not in scale_out and "4.12 s" not in scale_out
    helps = (ROOT / "docs" / "when-grpo-helps.md").read_text()
    assert "about 3 minutes on 2 CPU cores" not in helps and "solves 0.320 greedily" not in helps
    readme = (ROOT / "README.md").read_text()
    assert "+7.0 points [+4.7, +8.6]" not in readme and "excluding 0" not in readme
    assert "no longer rebuilds" in readme
