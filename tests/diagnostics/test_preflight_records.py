"""Issue 56: the preflight's pilot record, length coupling and family rows are dataclasses whose to_dict is
their part of preflight.json and whose from_dict reads it back. A preflight.json (and .md) written before
they were typed -- by `grpolab preflight` at commit 67d0a59 on a tiny model, with a 2-step pilot and two task
families (tests/diagnostics/preflight_written_before_issue56/; the command is in that folder's README) --
reads back into the typed result and is written again byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpolab.diagnostics.preflight import (
    INDICATED,
    NOT_INDICATED,
    DegenerateGain,
    FamilyRow,
    LengthCoupling,
    PairedChange,
    Pilot,
    PilotFamily,
    PilotTraining,
    PreflightResult,
    apply_pilot,
    length_coupling,
    pilot_from_outcomes,
    preflight_from_outcomes,
    preflight_markdown,
)
from grpolab.utils.io import atomic_write_json

BEFORE = Path(__file__).parent / "preflight_written_before_issue56"


def test_a_preflight_json_written_before_round_trips_byte_for_byte(tmp_path):
    text = (BEFORE / "preflight.json").read_text()
    res = PreflightResult.from_dict(json.loads(text))
    # typed, not dicts
    assert isinstance(res.pilot, Pilot) and isinstance(res.pilot.training, PilotTraining)
    assert isinstance(res.pilot.sampled, PairedChange) and isinstance(res.pilot.answers, DegenerateGain)
    assert set(res.pilot.families) == {"difficulty=2", "difficulty=3"}
    assert all(isinstance(f, PilotFamily) for f in res.pilot.families.values())
    assert set(res.families) == {"difficulty=2", "difficulty=3"}
    assert all(isinstance(f, FamilyRow) for f in res.families.values())
    assert isinstance(res.stats.length_coupling, LengthCoupling)
    # what the file says, read through the types
    assert res.pilot.steps == 2 and res.pilot.n_items == 24 and res.pilot.k == 4 and res.pilot.trainer_seed == 0
    assert res.pilot.verdict == NOT_INDICATED and res.verdict() == NOT_INDICATED
    assert res.families["difficulty=2"].headroom.n_items == 10 and res.families["difficulty=2"].verdict == INDICATED
    assert res.stats.length_coupling.mixed_groups == 2 and res.stats.length_coupling.ratio_ci == pytest.approx(
        (0.8571428571428571, 0.9583333333333334))
    # written again as `grpolab preflight` writes it: the same bytes, the same markdown
    atomic_write_json(tmp_path / "preflight.json", res.to_dict())
    assert (tmp_path / "preflight.json").read_text() == text
    assert preflight_markdown(res) == (BEFORE / "preflight.md").read_text()


def _res(solved, greedy, families=None, answers=None, k=8):
    return preflight_from_outcomes(greedy, [[1.0] * c + [0.0] * (k - c) for c in solved], group_size=4,
                                   max_new_tokens=16, families=families, greedy_answers=answers,
                                   sampled_lengths=[[3.0 + i % 5 + j for j in range(k)] for i in range(len(solved))])


def test_a_fresh_result_with_a_pilot_round_trips():
    fam = ["up"] * 32 + ["flat"] * 32
    answers = [str(i) for i in range(64)]
    before = _res([1] * 64, [0.0] * 64, fam, answers)
    after = _res([3] * 32 + [1] * 32, [1.0] * 8 + [0.0] * 56, fam, ["7"] * 8 + answers[8:])
    p = pilot_from_outcomes(before, after, steps=4, run_dir="runs/x/pilot", training=PilotTraining(4, 3, 7))
    p.trainer_seed = 5
    apply_pilot(before, p)
    d = before.to_dict()
    assert d["pilot"]["answers"]["flag"] and list(d["pilot"]["families"]) == ["up", "flat"]
    assert "ratio_ci" in d["stats"]["length_coupling"]
    back = PreflightResult.from_dict(json.loads(json.dumps(d)))
    assert json.dumps(back.to_dict()) == json.dumps(d) and back.pilot == p  # (as text: the cut share is NaN here)
    assert preflight_markdown(back) == preflight_markdown(before)


def test_length_coupling_without_an_interval_has_no_ratio_ci_key():
    lc = length_coupling([[1, 2], [3, 5]], [[True, False], [True, False]], ci=False)
    assert lc.ratio_ci is None and "ratio_ci" not in lc.to_dict()
    assert LengthCoupling.from_dict(lc.to_dict()) == lc
    assert lc.to_dict()["fail_success_length_ratio"] == pytest.approx((2 + 5) / (1 + 3))  # failures over successes
