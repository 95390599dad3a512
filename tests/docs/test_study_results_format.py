"""The issue-16 study results in docs/results/ keep the format other tools read (docs/results/README.md):
a ``precondition`` object of numbers, ``variants`` with per-seed ``seeds`` and ``final`` of equal
length, and how to reproduce them (``command``, ``commit``)."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
STUDIES = ["credit_teacher", "aggregation_coupled", "ratio_long", "web_lr_grid"]


@pytest.mark.parametrize("name", STUDIES)
def test_study_json_format(name):
    doc = json.loads((RESULTS / f"{name}.json").read_text())
    assert doc.get("name", name) == name
    pre = doc["precondition"]
    assert isinstance(pre, dict) and pre
    bad = {k: v for k, v in pre.items() if isinstance(v, bool) or not isinstance(v, (int, float))}
    assert not bad, f"{name}: precondition values must be numbers: {bad}"
    for variant, v in doc["variants"].items():
        assert isinstance(v["seeds"], list) and len(v["seeds"]) == len(v["final"]), (name, variant)
        assert all(isinstance(x, (int, float)) for x in v["final"]), (name, variant)
    assert doc["command"] and doc["commit"]
