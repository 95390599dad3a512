"""Issue 46: a truncated or corrupt .gguf is one error naming the file and the fix (a cut header
ended in a raw struct.error traceback; a cut tensor block in numpy's reshape message)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="needs the gguf package (pip install 'grpolab[gguf]')")
pytest.importorskip("accelerate", reason="needs accelerate (pip install 'grpolab[gguf]')")

sys.path.insert(0, str(Path(__file__).parent))
from tiny_gguf import build_tiny_llama, write_tiny_gguf  # noqa: E402

from grpolab.cli import main  # noqa: E402
from grpolab.config import ConfigError  # noqa: E402
from grpolab.models.gguf import check_gguf_file, load_gguf  # noqa: E402


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", build_tiny_llama(seed=3))


@pytest.mark.parametrize("keep", [20, 200, 0.5, -4])
def test_truncated_gguf_is_one_error(whole, tmp_path, keep):
    data = whole.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep > 0 else len(data) + keep)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:n])
    with pytest.raises(ConfigError) as e:
        load_gguf(cut)
    assert str(cut) in str(e.value) and ("truncated" in str(e.value)) and "again" in str(e.value)
    check_gguf_file(whole)  # the whole file passes


def test_cli_names_the_truncated_file(whole, tmp_path, capsys):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:300])
    rc = main(["models", "import", str(cut), "--out", str(tmp_path / "out")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and "truncated" in err[0], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()


def test_dry_run_checks_a_gguf_without_loading_it(whole, tmp_path, capsys, monkeypatch):
    import grpolab.models.gguf as G

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:300])
    rc = main(["train", "--dry-run", "--set", f"model.path={cut}", "--set", f"trainer.run_dir={tmp_path / 'r'}"])
    assert rc == 2 and "truncated" in capsys.readouterr().err

    def no_load(*a, **k):
        raise AssertionError("the dry run loaded the model")

    monkeypatch.setattr(G, "load_gguf", no_load)
    assert main(["train", "--dry-run", "--set", f"model.path={whole}", "--set", f"trainer.run_dir={tmp_path / 'r'}",
                 "--set", "sft.enabled=no"]) == 0
    assert not (tmp_path / "r").exists()
