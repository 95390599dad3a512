"""Checkpoints: Hugging Face model + trainer state (optimizer, scheduler, RNG, step), atomic.

Layout of ``RUN_DIR/checkpoints/``::

    step_000040/model/       # save_pretrained format: loads in transformers / vLLM unchanged
    step_000040/state.pt     # optimizer, scheduler, RNG states, step, policy-lag snapshots
    latest                   # text file naming the newest complete checkpoint

A checkpoint is written to a hidden temporary folder and renamed into place; ``latest`` is
rewritten atomically afterwards, so a crash at any point leaves the previous checkpoint usable.
The supervised warm start's in-progress checkpoints use the same writer and layout (see
:class:`grpolab.train.warm_start.WarmStartCheckpoint`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from grpolab.models.io import load_weights_into  # noqa: F401  (resume reads weights through it)

from grpolab.utils.io import atomic_write_text
from grpolab.utils.proc import pid_alive


def rng_state(generator: torch.Generator | None = None) -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if generator is not None:
        state["generator"] = generator.get_state()
    return state


def set_rng_state(state: dict[str, Any], generator: torch.Generator | None = None) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if generator is not None and "generator" in state:
        generator.set_state(state["generator"])


@dataclass
class Checkpoint:
    path: Path
    step: int

    @property
    def model_dir(self) -> Path:
        return self.path / "model"

    def load_state(self) -> dict[str, Any]:
        """The trainer state saved with the checkpoint (optimizer, scheduler, RNG, step).

        Raises:
            ConfigError: ``state.pt`` cannot be read (truncated or corrupt); the message names the
                checkpoint and how to go on.
        """
        try:
            return torch.load(self.path / "state.pt", map_location="cpu", weights_only=False)
        except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, EOFError or UnpicklingError on a cut file
            raise self.unreadable("state.pt", e) from None

    def load_weights_into(self, model) -> None:
        """Copy the checkpoint's weights into ``model`` (:func:`grpolab.models.io.load_weights_into`).

        Raises:
            ConfigError: a weights file cannot be read (truncated or corrupt), or holds tensors of
                another shape or name than ``model``'s.
        """
        try:
            load_weights_into(model, self.model_dir)
        except Exception as e:  # noqa: BLE001 - safetensors' own error type, OSError, RuntimeError
            raise self.unreadable("model weights", e) from None

    def unreadable(self, what: str, e: BaseException):
        """The :class:`~grpolab.errors.ConfigError` for a part of this checkpoint that cannot be
        used, with the way on: the checkpoint before it, or starting over."""
        from grpolab.errors import ConfigError

        run = self.path.parent.parent
        older = sorted(p for p in self.path.parent.glob("step_*") if p.is_dir() and p.name < self.path.name
                       and (p / "state.pt").exists())
        way = (f"delete {self.path} to resume from {older[-1].name}" if older else
               f"start over with `grpolab train --overwrite` (trainer.run_dir={run})")
        detail = " ".join(f"{type(e).__name__}: {e}".split())[:200]
        return ConfigError(f"checkpoint {self.path}: its {what} cannot be read ({detail}); the file is truncated or "
                           f"corrupt (a full disk or a killed copy?): {way}")


def save_checkpoint(
    run_dir: str | Path, step: int, model, tokenizer, state: dict[str, Any], *, keep: int = 2
) -> Checkpoint:
    """Write ``step``'s checkpoint atomically and prune all but the newest ``keep``.

    A model holding NaN or infinity is never written (:class:`~grpolab.train.nonfinite.NonFiniteError`)."""
    from grpolab.train.nonfinite import require_finite_model

    require_finite_model(model, f"weights of step {step} (its checkpoint was not written)")
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:06d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write_checkpoint(tmp, model, tokenizer, state)
    except BaseException:  # a full disk, a kill: the half-written folder frees its space; the last checkpoint stands
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    atomic_write_text(root / "latest", name + "\n")
    complete = sorted(p for p in root.glob("step_*") if p.is_dir())
    for old in complete[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return Checkpoint(final, step)


def _write_checkpoint(tmp: Path, model, tokenizer, state: dict[str, Any]) -> None:
    """The files of one checkpoint, into the temporary folder ``tmp``."""
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp / "model")
    from grpolab.models.lora import LORA_CHECKPOINT_FILE, has_lora, lora_checkpoint_settings

    if has_lora(model):  # so that load_model rebuilds the adapted layout (eval/credit of a run in progress)
        atomic_write_text(tmp / "model" / LORA_CHECKPOINT_FILE, json.dumps(lora_checkpoint_settings(model)) + "\n")
    torch.save(state, tmp / "state.pt")


def latest_checkpoint(run_dir: str | Path) -> Checkpoint | None:
    """The newest complete checkpoint of ``run_dir``, or None."""
    root = Path(run_dir) / "checkpoints"
    pointer = root / "latest"
    if pointer.exists():
        name = pointer.read_text().strip()
        if (root / name / "state.pt").exists():
            return Checkpoint(root / name, int(name.split("_")[1]))
    complete = sorted(p for p in root.glob("step_*") if (p / "state.pt").exists())
    if complete:
        return Checkpoint(complete[-1], int(complete[-1].name.split("_")[1]))
    return None


def remove_stale_temporaries(root: str | Path) -> list[Path]:
    """Remove the ``.tmp-*`` folders in ``root`` (e.g. ``RUN_DIR/checkpoints``) whose writer is gone.

    A folder named for a live process other than this one is left alone: it is being written.
    """
    root = Path(root)
    removed = []
    for p in sorted(root.glob(".tmp-*")) if root.exists() else []:
        pid = p.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and pid_alive(int(pid)):
            continue  # another process is writing it right now
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def load_weights(model_dir: str | Path, like) -> dict[str, torch.Tensor]:
    """The state dict saved in ``model_dir`` (safetensors), for ``like`` (a model of the same shape).

    A tied head (``lm_head`` saved once, as the embedding) keeps ``like``'s own tensor; any other
    missing parameter is an error.
    """
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    missing = set(like.state_dict()) - set(state)
    if missing and not all("lm_head" in k for k in missing):
        raise RuntimeError(f"checkpoint {model_dir} lacks parameters: {sorted(missing)[:5]} ...")
    for k in missing:  # tied head: saved once as the embedding
        state[k] = like.state_dict()[k]
    return state
