"""Issue 46: LoRA without peft names the install command, before the model loads or warms up."""

from __future__ import annotations

import sys

import pytest

from grpolab.cli import main
from grpolab.config import ConfigError, load_config

INSTALL = 'pip install -e ".[lora]"'


@pytest.fixture
def no_peft(monkeypatch):
    for name in [m for m in sys.modules if m == "peft" or m.startswith("peft.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError


def test_apply_lora_names_the_install_command(no_peft):
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.models.lora import apply_lora

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=64))
    with pytest.raises(ImportError) as e:
        apply_lora(model, {"r": 4})
    assert INSTALL in str(e.value) and "No module named" not in str(e.value)


def test_train_refuses_before_the_warm_start(no_peft, tmp_path):
    from grpolab.train import train

    run = tmp_path / "run"
    cfg = load_config(overrides=["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2",
                                 "model.intermediate_size=64", "model.lora={r: 4}", "sft.enabled=yes",
                                 "sft.max_steps=2", f"trainer.run_dir={run}", "log.progress=false"])
    logged = []
    with pytest.raises(ConfigError, match=r'pip install -e "\.\[lora\]"'):
        train(cfg, log=logged.append)
    assert not run.exists() and not logged  # nothing built, nothing written, no warm start


def test_cli_one_error_line(no_peft, tmp_path, capsys):
    rc = main(["train", "--set", "model.lora={r: 4}", "--set", f"trainer.run_dir={tmp_path / 'run'}"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: model.lora needs the peft package")
    assert INSTALL in err[0]
