"""benchmarks/speed/gpu_check.py --dry-run: the GPU check's code path (chat template, GRPO and RLSD, with
and without LoRA) runs on CPU at a tiny width and reports finite numbers for all four runs."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "speed" / "gpu_check.py"


def test_gpu_check_dry_run(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("GPU_CHECK_WRITE_DRY_RUN", "1")
    out = tmp_path / "gpu_check.json"
    assert mod.main(["--dry-run", "--steps", "1", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["method"], r["lora"]) for r in rows] == [("grpo", False), ("grpo", True), ("rlsd", False), ("rlsd", True)]
    for r in rows:
        assert r["rollout_tok_s"] > 0 and r["update_tok_s"] > 0 and r["peak_mem_mib"] > 0
        assert (r["trainable_frac"] < 0.5) == r["lora"]
        assert (r["teacher_tok_s"] is not None) == (r["method"] == "rlsd")
        assert r["mfu_update"] is None  # no bf16 peak is known for a CPU
    vs = json.loads(out.read_text())["rollout_vs_hf"]
    assert vs["grpolab_tok_s"] > 0 and vs["hf_generate_tok_s"] > 0 and vs["rows"] == 2 * 4
    assert vs["flop_floor_tok_s"] is None  # no peak known for a CPU
    text = capsys.readouterr().out
    assert text.count("| grpo") == 2 and text.count("| rlsd") == 2 and "HF generate" in text
