"""benchmarks/experiments/real_credit.py (issue 33's report) against hand values."""

import importlib.util
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments" / "real_credit.py"
_spec = importlib.util.spec_from_file_location("bench_real_credit", _SCRIPT)
real_credit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real_credit)


def test_wilson_interval_matches_published_values():
    # 50 of 100: the textbook 95% Wilson interval (0.4038, 0.5962); 0 of 10: (0, 0.2775)
    assert real_credit.wilson(50, 100) == pytest.approx((0.4038, 0.5962), abs=1e-4)
    lo, hi = real_credit.wilson(0, 10)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.2775, abs=1e-4)


def test_precondition_reads_the_trained_variant_and_the_bound():
    rows = [{"template": "user", "auc_first_wrong": 0.65, "auc_sum_delta": 0.89, "responses": 256, "placement": "user"},
            {"template": "user_bare", "auc_first_wrong": 0.81, "auc_sum_delta": 0.80, "responses": 256,
             "placement": "user"}]
    pre = real_credit.precondition({"rows": rows, "prompts": 32, "seed": 0}, "user")
    assert (pre["teacher_auc"], pre["response_auc"], pre["met"]) == (0.65, 0.89, False)
    assert real_credit.precondition({"rows": rows}, "user_bare")["met"] is True
    assert set(pre["by_variant"]) == {"user", "user_bare"}
    with pytest.raises(SystemExit, match="not in the signal file"):
        real_credit.precondition({"rows": rows}, "system")
