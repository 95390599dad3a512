"""studies/preregistered/run.py: the registered endpoint and test on hand-made seed records, and the
registration as the README states it (the runs themselves are smoke-tested by hand: they train)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("prereg_run", ROOT / "studies" / "preregistered" / "run.py")
prereg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(prereg)


def _record(tmp, study, seed, arms, registered=True):
    rec = {"study": study, "seed": seed, "registered": registered, "arms": arms}
    (tmp / f"seed_{seed}.json").write_text(json.dumps(rec))


def test_registration_matches_the_readme():
    text = (ROOT / "studies" / "preregistered" / "README.md").read_text()
    assert prereg.SEEDS == list(range(100, 110)) and "**Seeds:** 100-109" in text
    assert prereg.STUDIES["ba_pairsum"]["factor"] == ("objective.aggregation", ["balanced", "token"])
    assert "Margin for \"no difference\": 3 points (0.03)" in text and prereg.STUDIES["ba_pairsum"]["margin"] == 0.03
    assert prereg.STUDIES["gspo_drift"]["endpoint"] == "final_1024" and "1,024 held-out items" in text
    assert prereg.STUDIES["lr_arith"]["endpoint"] == "change_first_arm"
    for name, spec in prereg.STUDIES.items():
        assert f"`{name}`" in text and (ROOT / spec["config"]).exists()


def test_analyse_applies_the_registered_test(tmp_path):
    # balanced - token per seed: +0.01, +0.02, +0.03 -> mean +0.02; sign flips of (1, 2, 3): 2 of 8
    for seed, d in zip((100, 101, 102), (0.01, 0.02, 0.03)):
        _record(tmp_path, "ba_pairsum", seed, {"balanced": {"final": 0.5 + d, "start": 0.5},
                                                "token": {"final": 0.5, "start": 0.5}})
    with pytest.raises(SystemExit, match="3 of the 10 registered seeds are recorded"):
        prereg.analyse("ba_pairsum", tmp_path)  # the endpoint is read once, after the 10th seed
    res = prereg.analyse("ba_pairsum", tmp_path, partial=True)
    assert res["partial_look"] is True
    c = res["comparison"]
    assert c["value"] == pytest.approx(0.02) and c["sign_flip_p"] == pytest.approx(0.25)
    assert c["margin"] == 0.03 and c["verdict"] == "inconclusive"  # a margin was registered
    assert res["seeds"] == [100, 101, 102] and res["complete"] is False
    assert "balanced - token (points): +2.0" in (tmp_path / "RESULTS.md").read_text()


def test_lr_endpoint_is_the_change_of_the_first_arm(tmp_path):
    rec = {"arms": {"1e-4": {"final": 0.45, "start": 0.36}, "1e-3": {"final": 0.06, "start": 0.36}}}
    assert prereg.endpoint("lr_arith", rec) == (0.45, 0.36)
    assert prereg.endpoint("gspo_drift", {"arms": {"gspo": {"final_1024": 0.9}, "token": {"final_1024": 0.88}}}) \
        == (0.9, 0.88)


def test_analyse_refuses_mixed_records(tmp_path):
    arms = {"balanced": {"final": 0.5}, "token": {"final": 0.4}}
    _record(tmp_path, "ba_pairsum", 100, arms)
    _record(tmp_path, "ba_pairsum", 999, arms, registered=False)
    with pytest.raises(SystemExit, match="mixes registered and other records"):
        prereg.analyse("ba_pairsum", tmp_path)


def test_a_seed_record_names_the_commit_it_ran_on():
    import re
    import subprocess

    version = prereg._code_version()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if not head:
        pytest.skip("not a git checkout")
    assert re.fullmatch(r"[0-9a-f]{40}", version["commit"]) and version["commit"] == head
    assert isinstance(version["dirty"], bool)
