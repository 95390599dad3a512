"""tools/metrics_diff.py: identical rows pass, a changed value or a missing key is reported."""

import importlib.util
import json
from pathlib import Path

spec = importlib.util.spec_from_file_location("metrics_diff", Path(__file__).parents[2] / "tools" / "metrics_diff.py")
md = importlib.util.module_from_spec(spec)
spec.loader.exec_module(md)


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_time_fields_are_ignored_and_real_changes_are_not(tmp_path, capsys):
    a = _write(tmp_path / "a.jsonl", [{"step": 1, "reward/mean": 0.5, "time/step": 1.0, "actor/x": 1}])
    same = _write(tmp_path / "b.jsonl", [{"step": 1, "reward/mean": 0.5, "time/step": 9.0, "actor/x": 1}])
    assert md.main([a, same]) == 0
    changed = _write(tmp_path / "c.jsonl", [{"step": 1, "reward/mean": 0.25, "time/step": 1.0, "actor/x": 1}])
    assert md.main([a, changed]) == 1
    assert "reward/mean: 0.5 != 0.25" in capsys.readouterr().out
    missing = _write(tmp_path / "d.jsonl", [{"step": 1, "reward/mean": 0.5}])
    assert md.main([a, missing]) == 1
    assert md.main([a, missing, "--ignore", "actor/"]) == 0
    assert md.main([a, _write(tmp_path / "e.jsonl", [])]) == 1
