"""tools/run_diff.py: identical runs pass; a changed weight, record or accuracy is reported."""

import importlib.util
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

spec = importlib.util.spec_from_file_location("run_diff", Path(__file__).parents[2] / "tools" / "run_diff.py")
rd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rd)


def _run(path: Path, w: float = 1.0, acc: float = 0.5, seconds: float = 1.0) -> Path:
    for sub in ("sft", "final"):
        (path / sub).mkdir(parents=True)
        save_file({"w": torch.full((2, 2), w)}, str(path / sub / "model.safetensors"))
    (path / "sft" / "sft.json").write_text(json.dumps({"steps": 3, "accuracy": 0.4, "history": [], "sft_config": {},
                                                       "key": {}, "seconds": seconds}))
    (path / "headroom.json").write_text(json.dumps({"verdict": "headroom"}))
    (path / "summary.json").write_text(json.dumps({"accuracy": {"final": acc}, "seconds": seconds, "per_task": [
        {"task": "3", "n": 4, "before": 0.25, "after": acc, "change": acc - 0.25, "headroom_items": seconds}]}))
    return path


def test_identical_runs_pass_and_each_change_is_found(tmp_path, capsys):
    a = _run(tmp_path / "a")
    assert rd.main([str(a), str(_run(tmp_path / "b", seconds=9.0))]) == 0   # time and headroom columns left out
    assert rd.main([str(a), str(_run(tmp_path / "c", w=1.0 + 1e-7))]) == 1
    assert "final/model.safetensors: DIFFERENT" in capsys.readouterr().out
    assert rd.main([str(a), str(_run(tmp_path / "d", acc=0.75))]) == 1
    e = _run(tmp_path / "e")
    shutil.rmtree(e / "sft")
    assert rd.main([str(a), str(e)]) == 1


def test_the_preflight_record_is_compared_less_its_clock(tmp_path, capsys):
    def with_preflight(path, seconds, verdict="indicated"):
        run = _run(path)
        (run / "headroom.json").unlink()
        (run / "preflight.json").write_text(json.dumps({"verdict": verdict, "settings": {"k": 8, "seconds": seconds}}))
        return run

    a = with_preflight(tmp_path / "a", 10.0)
    assert rd.main([str(a), str(with_preflight(tmp_path / "b", 99.0))]) == 0
    assert rd.main([str(a), str(with_preflight(tmp_path / "c", 10.0, verdict="can't tell"))]) == 1
    assert "preflight.json (but settings.seconds): DIFFERENT" in capsys.readouterr().out
    d = with_preflight(tmp_path / "d", 10.0)
    (d / "preflight.json").unlink()   # a pre-check in one run only
    assert rd.main([str(a), str(d)]) == 1
    (a / "preflight.json").unlink()   # in neither: nothing to compare, not a difference
    assert rd.main([str(a), str(d)]) == 0
