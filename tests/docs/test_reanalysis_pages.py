"""benchmarks/experiments/reanalysis.py: the results pages' generated tables agree with their committed
records, rebuilt items reproduce the records' own per-seed McNemar tests, and no re-rendered page keeps
the old inference (issue 57)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

from grpolab.diagnostics.inference import mcnemar_items

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("reanalysis", ROOT / "benchmarks" / "experiments" / "reanalysis.py")
ra = importlib.util.module_from_spec(_spec)
sys.modules["reanalysis"] = ra  # dataclasses look their module up there
_spec.loader.exec_module(ra)

PAGES = sorted({v[3] for v in ra.STUDIES.values()} | {v[1] for v in ra.SHARED.values()})


@pytest.fixture(scope="module")
def analysis():
    return ra.analysis()


def test_pages_show_the_tables_their_records_give(analysis):
    """Every generated block on every page equals what the script renders from the committed records
    (a hand edit of a table, or a record changed without re-rendering, fails here)."""
    pages = ra.render_pages(ra.page_tables(analysis))
    assert set(pages) == {"docs/results/credit.md", "docs/results/credit_teacher.md", "docs/results/real_credit.md",
                          "docs/results/miniwob_log.md", "docs/results/web_lr_grid.md", "docs/credit.md"}
    stale = [p for p, text in pages.items() if (ROOT / p).read_text() != text]
    assert not stale, f"out of date: {stale}; run python benchmarks/experiments/reanalysis.py --pages"


def test_committed_reanalysis_record_is_current(analysis):
    """docs/results/reanalysis.json (which docs/claims.yaml cites) is what the script gives today."""
    committed = json.loads((ROOT / "docs" / "results" / "reanalysis.json").read_text())
    assert committed == json.loads(json.dumps(analysis)), \
        "run python benchmarks/experiments/reanalysis.py --out docs/results/reanalysis.json --pages"


@pytest.mark.parametrize("cid", sorted(ra.SHARED))
def test_rebuilt_items_give_the_records_own_mcnemar_p(cid):
    """The record's p_mcnemar was computed by miniwob_paired.py on the real per-item outcomes; the items
    rebuilt from the counts must give the same exact McNemar p and the same accuracies."""
    rec = json.loads((ROOT / "docs" / "results" / ra.SHARED[cid][0]).read_text())
    for model in rec["models"]:
        for row in model["rows"]:
            trained, start = ra.items_from_counts(row)
            c = mcnemar_items(trained, start)
            assert (c.gained, c.lost, c.n) == (row["gained"], row["lost"], row["n"])
            assert math.isclose(c.accuracy_a, row["trained"], abs_tol=1e-12)
            assert math.isclose(c.accuracy_b, row["start"], abs_tol=1e-12)
            assert math.isclose(c.p_value, row["p_mcnemar"], rel_tol=1e-9), (cid, row["task"])


def test_items_from_counts_refuses_counts_that_do_not_add_up():
    with pytest.raises(ValueError, match="do not add up"):
        ra.items_from_counts({"task": "t", "n": 10, "start": 0.5, "trained": 0.5, "gained": 3, "lost": 1})


def test_shared_items_seed_level_on_a_hand_record(tmp_path, monkeypatch):
    """Three seeds on the same 100 items, changes +2, +4, +6 points: mean +4, sd 2, t interval
    4 +- t(0.975, 2) * 2 / sqrt(3) = 4 +- 4.9683 (t(0.975, 2) = 4.302653 from tables); sign-flip p 2/8."""
    rows = [{"task": "a", "n": 100, "start": 0.5, "trained": 0.5 + d / 100, "gained": 10 + d, "lost": 10}
            for d in (2, 4, 6)]
    (tmp_path / "r.json").write_text(json.dumps({"models": [{"model": f"s{i}", "rows": [r]}
                                                            for i, r in enumerate(rows)]}))
    monkeypatch.setattr(ra, "RECORDS", tmp_path)
    s = ra.shared_items("r.json")["tasks"]["a"]["seed_level"]
    assert math.isclose(s["value"], 0.04, abs_tol=1e-12)
    assert math.isclose(s["high"] - s["value"], 4.302653 * 0.02 / math.sqrt(3), rel_tol=1e-5)
    assert s["sign_flip_p"] == 0.25 and s["verdict"] != "significant"


def test_credit_runs_become_variants_in_seed_order():
    rec = {"runs": [{"credit": "g", "seed": s, "start_accuracy": 0.1, "final_accuracy": f, "best_accuracy": f}
                    for s, f in ((1, 0.3), (0, 0.2))]}
    assert ra.credit_variants(rec) == {"g": {"seeds": [0, 1], "start": [0.1, 0.1], "final": [0.2, 0.3],
                                             "best": [0.2, 0.3]}}


@pytest.mark.parametrize("page", PAGES)
def test_no_page_keeps_the_old_inference(page):
    """Issue 57: no bootstrap over a few seeds, no items pooled over seeds that share them."""
    text = (ROOT / page).read_text()
    for old in ("pooled gained/lost, p", "95% bootstrap intervals over seeds", "over seeds (bootstrap",
                "each significant pooled", "95% CI] |"):
        assert old not in text, f"{page} still says {old!r}"
