"""tools/objective_identity.py: two snapshots of the same code compare equal bit for bit, a
one-ulp change in one gradient value is reported by case and tensor, and the cases cover every
ratio level x aggregation."""

import importlib.util
import itertools
import json
from pathlib import Path

import torch

spec = importlib.util.spec_from_file_location(
    "objective_identity", Path(__file__).parents[2] / "tools" / "objective_identity.py")
oi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oi)


def test_the_cases_cover_every_level_and_aggregation():
    from grpolab.objectives import AGGREGATIONS, RATIO_LEVELS

    seen = {(c["ratio"], c["agg"]) for _, c in oi.cases()}
    assert seen == set(itertools.product(RATIO_LEVELS.names(), AGGREGATIONS.names()))


def test_snapshots_compare_and_a_one_ulp_change_is_found(tmp_path, monkeypatch, capsys):
    few = list(itertools.islice(oi.cases(), 0, 768, 97))       # 8 cases spread over the grid
    monkeypatch.setattr(oi, "cases", lambda: iter(few))
    a, b = str(tmp_path / "a.pt"), str(tmp_path / "b.pt")
    oi.snapshot(a)
    oi.snapshot(b)
    assert oi.compare(a, b, str(tmp_path / "same.json")) == 0
    assert json.loads((tmp_path / "same.json").read_text())["tensors_differing"] == []
    snap = torch.load(b)
    name = few[3][0]
    g = snap[name]["grad"]
    g.view(-1)[5] = torch.nextafter(g.view(-1)[5], torch.tensor(10.0, dtype=g.dtype))
    torch.save(snap, b)
    assert oi.compare(a, b, str(tmp_path / "diff.json")) == 1
    assert json.loads((tmp_path / "diff.json").read_text())["tensors_differing"] == [[name, "grad"]]
    assert f"DIFFERENT: {name} grad" in capsys.readouterr().out
