"""summary.md's per-task verdict column shows the preflight's GRPO verdict with the items it rests on
(issue 43: the sums example's summary had said "no headroom" next to gains of +56 and +61 points)."""

import json

from grpolab.config import Config
from grpolab.diagnostics.preflight import preflight_from_outcomes
from grpolab.train.loop import TrainResult
from grpolab.measure.preflight import write_preflight
from grpolab.train.report import write_report


def _families(pairs):
    return {name: {"solved": s, "n": n, "accuracy": s / n} for name, (s, n) in pairs.items()}


def test_summary_shows_the_preflight_verdict_and_its_sample_size(tmp_path):
    # family "carry": 12 items, half the samples solve each -> indicated; "no carry": 6 items -> can't tell
    fam = ["family=carry"] * 12 + ["family=no carry"] * 6
    rewards = [[1.0] * 4 + [0.0] * 4] * 12 + [[0.0] * 8] * 6
    res = preflight_from_outcomes([0.0] * 18, rewards, group_size=8, max_new_tokens=12, families=fam)
    write_preflight(tmp_path, res)
    (tmp_path / "headroom.json").write_text(json.dumps({"verdict": "no headroom", "families": {}}))  # ignored
    cfg = Config()
    result = TrainResult(run_dir=tmp_path, steps=10, start_accuracy=0.2, final_accuracy=0.7, best_accuracy=0.7,
                         seconds=12.0, start_families=_families({"carry": (2, 100), "no carry": (20, 100)}),
                         final_families=_families({"carry": (60, 100), "no carry": (80, 100)}))
    write_report(tmp_path, cfg, result, plots=False)
    md = (tmp_path / "summary.md").read_text()
    assert "GRPO verdict before RL (items)" in md and "preflight greedy / pass@8 / reachable" in md
    assert "| carry | 100 | 0.020 | 0.600 | +0.580 | indicated (12) | 0.000 / 1.000 / 1.000 |" in md
    assert "| no carry | 100 | 0.200 | 0.800 | +0.600 | can't tell (6) | 0.000 / 0.000 / 0.000 |" in md
    assert "no headroom" not in md
    assert "Preflight before RL ([preflight.md](preflight.md), 18 held-out items x 8 samples): **GRPO indicated**" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["preflight_verdict"] == "indicated" and data["preflight_items"] == 18
    carry = data["per_task"][0]
    got = (carry["headroom_verdict"], carry["headroom_items"], carry["verdict_source"])
    assert got == ("indicated", 12, "preflight")
