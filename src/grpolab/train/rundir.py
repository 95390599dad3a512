"""The run directory and its one owner: :class:`RunDir`.

Layout::

    RUN_DIR/config.yaml      the run's config (written only after its model and data loaded)
    RUN_DIR/sft/             the cached warm start (HF model) + sft.json (its settings key)
    RUN_DIR/sft.partial/     the warm start's in-progress checkpoint while it trains (see
                             WarmStartCheckpoint); removed once sft/ is complete
    RUN_DIR/checkpoints/     step_NNNNNN/{model/, state.pt} and ``latest`` (see checkpoint.py)
    RUN_DIR/final/           the trained model (HF format)
    RUN_DIR/metrics.jsonl    one row per step; tb/ plots/ summary.{md,json} headroom.{json,md}

:meth:`RunDir.model_dir` is the one answer to "which model does this run hold" (used by
``grpolab eval``, ``headroom``, ``diagnose`` and ``credit``). The warm-start cache is keyed on the
settings that produced it (:func:`warm_start_key`): a cache built with other settings is rebuilt,
never silently reused; a killed warm start continues from its in-progress checkpoint when it is
run again with the same settings (:class:`WarmStartCheckpoint`). Problems a user can fix raise
:class:`RunDirError` with the fix in the message.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

import yaml

from grpolab.config import Config, ConfigError, config_from_dict
from grpolab.train.checkpoint import (Checkpoint, latest_checkpoint, load_weights, remove_stale_temporaries,
                                      save_checkpoint)
from grpolab.utils.io import atomic_write_text

__all__ = ["RESUME_FIXED_KEYS", "RunDir", "RunDirError", "WarmStartCheckpoint", "in_progress_dir", "resolve_model",
           "warm_start_key", "warm_start_status"]


class RunDirError(ConfigError):
    """A run directory that cannot be used as asked (the message says why and what to do)."""


#: Settings a resumed run cannot change: the checkpoint holds a model of this shape, trained on
#: this data in this order. (``model.path`` may change: the checkpoint holds the weights, so a
#: moved base model can be pointed to; it must still load.)
RESUME_FIXED_KEYS = ("model.hidden_size", "model.num_layers", "model.num_heads",
                     "model.intermediate_size", "task.name", "task.options", "task.n_train", "trainer.seed")


_NOT_WARM_START_MODEL = ("device", "lora", "lora_save", "attn_implementation", "gradient_checkpointing")
_NOT_WARM_START_TASK = ("chat_template", "system_prompt", "prompt_template")
_NOT_WARM_START_SFT = ("save_every", "snapshot_every")
#: The default prompt settings: a key without a ``prompt_format`` entry means these (so warm starts
#: cached before the checks used the run's prompt format keep matching).
_PLAIN_FORMAT = {"chat_template": "auto", "system_prompt": "", "prompt_template": "{prompt}"}


def warm_start_key(cfg: Config) -> dict[str, Any]:
    """The settings that produce a run's warm start: model (but its device), task, sft, seed, eval length, env."""
    # LoRA is added after the warm start, and attention kernels / checkpointing do not change what
    # the warm start learns: they are not part of the key; the prompt format is (when not the
    # default), since the warm start's accuracy checks, which decide when it stops, use it;
    # nor is how often it checkpoints (a resumed warm start is bit-identical to an uninterrupted one)
    # or keeps snapshots
    model = {k: v for k, v in dataclasses.asdict(cfg.model).items() if k not in _NOT_WARM_START_MODEL}
    task = {k: v for k, v in dataclasses.asdict(cfg.task).items() if k not in _NOT_WARM_START_TASK}
    sft = {k: v for k, v in dataclasses.asdict(cfg.sft).items() if k not in _NOT_WARM_START_SFT}
    key = {"model": model, "task": task, "sft": sft,
           "seed": cfg.trainer.seed, "max_new_tokens": cfg.rollout.max_new_tokens,
           "env": dataclasses.asdict(cfg.env)}
    prompt_format = {k: getattr(cfg.task, k) for k in _NOT_WARM_START_TASK}
    if prompt_format != _PLAIN_FORMAT:  # the warm start's accuracy checks prompt in the run's format
        key["prompt_format"] = prompt_format
    if cfg.sft.privileged_share > 0:  # the teacher-template share was rendered in credit.template
        key["teacher_template"] = cfg.credit.template
    return key


def _differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += _differences(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    # yaml/json round trips turn tuples into lists
    norm = (lambda v: list(v) if isinstance(v, tuple) else v)
    return [] if norm(old) == norm(new) else [f"{prefix[:-1]}: {old!r} -> {new!r}"]


class RunDir:
    """A grpolab run directory (it need not exist yet)."""

    def __init__(self, path: str | os.PathLike) -> None:
        if not str(path).strip():
            raise RunDirError("the run directory is empty; set trainer.run_dir=PATH")
        self.path = Path(path)

    # ------------------------------------------------------------------ layout
    @property
    def config_file(self) -> Path:
        return self.path / "config.yaml"

    @property
    def sft(self) -> Path:
        return self.path / "sft"

    @property
    def sft_in_progress(self) -> Path:
        """The warm start's in-progress checkpoint (:class:`WarmStartCheckpoint`), while it trains."""
        return in_progress_dir(self.sft)

    @property
    def final(self) -> Path:
        return self.path / "final"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def latest_checkpoint(self) -> Checkpoint | None:
        return latest_checkpoint(self.path)

    def is_run(self) -> bool:
        return self.config_file.exists()

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # ------------------------------------------------------------------ config
    def load_config(self) -> Config:
        """The config the run was started with."""
        if not self.is_run():
            raise RunDirError(f"{self.path} is not a grpolab run directory (no config.yaml there)")
        data = yaml.safe_load(self.config_file.read_text())
        if not isinstance(data, dict):
            raise RunDirError(f"{self.config_file} does not hold a config mapping; is it a grpolab run directory?")
        return config_from_dict(data)

    def write_config(self, cfg: Config) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.config_file, yaml.safe_dump(cfg.to_dict(), sort_keys=False))

    def resume_config(self, path: str | os.PathLike | None = None, overrides: list[str] | None = None) -> Config:
        """The saved config with a config file and ``--set`` overrides merged in (saved < file < --set).

        Raises :class:`RunDirError` if they change a setting the checkpoint depends on
        (:data:`RESUME_FIXED_KEYS`).
        """
        from grpolab.config import merge_config

        saved = self.load_config()
        cfg = merge_config(saved, path, overrides)
        cfg.trainer.run_dir = str(self.path)
        old, new = saved.to_dict(), cfg.to_dict()
        changed = [d for key in RESUME_FIXED_KEYS
                   for d in _differences(old[key.split(".")[0]].get(key.split(".")[1]),
                                         new[key.split(".")[0]].get(key.split(".")[1]), key + ".")]
        if changed:
            raise RunDirError(
                f"--resume {self.path} cannot change {'; '.join(changed)}: the checkpoints were trained "
                f"with the saved value; start a new run (another trainer.run_dir) to change it")
        return cfg.validate()

    # ------------------------------------------------------------------ which model does it hold
    def model_dir(self, *, warm_start: bool = True) -> Path:
        """The run's newest model: ``final/``, else the newest checkpoint, else (with
        ``warm_start``) the warm start ``sft/``. Raises :class:`RunDirError` when there is none."""
        if (self.final / "config.json").exists():
            return self.final
        ckpt = self.latest_checkpoint()
        if ckpt is not None:
            return ckpt.model_dir
        if warm_start and (self.sft / "config.json").exists():
            return self.sft
        if not warm_start and self.is_run():
            raise RunDirError(f"{self.path} has no trained model yet (no final/ or checkpoints/)")
        if not self.is_run():
            raise RunDirError(f"{self.path} is neither a model directory nor a grpolab run directory "
                              "(no config.json, no config.yaml)")
        raise RunDirError(
            f"run directory {self.path} holds no model yet (no final/, checkpoints/ or sft/): its "
            f"training stopped before the warm start finished; continue it with `grpolab train "
            f"--resume {self.path}`")

    # ------------------------------------------------------------------ warm-start cache
    def warm_start_status(self, cfg: Config) -> tuple[str, list[str]]:
        """``(status, differences)`` of the cached warm start ``RUN_DIR/sft`` for ``cfg``
        (:func:`warm_start_status`)."""
        return warm_start_status(self.sft, cfg)

    # ------------------------------------------------------------------ housekeeping
    def clean_stale(self) -> list[Path]:
        """Remove temporary folders and files left by a killed process (their writer is gone)."""
        return remove_stale_temporaries(self.checkpoints)

    def start_over(self, *, keep_warm_start: bool) -> None:
        """Delete the previous run's outputs (``--overwrite``); the warm start too unless kept.

        A killed warm start's ``sft.partial/`` stays: the next warm start resumes it if it has the
        same settings, and starts over (and says so) if not."""
        for sub in ("checkpoints", "tb", "plots", "final") + (() if keep_warm_start else ("sft", "sft.snapshots")):
            shutil.rmtree(self.path / sub, ignore_errors=True)
        for f in ("metrics.jsonl", "summary.md", "summary.json"):
            (self.path / f).unlink(missing_ok=True)




def warm_start_status(model_dir: str | os.PathLike, cfg: Config) -> tuple[str, list[str]]:
    """``(status, differences)`` of the finished warm start in ``model_dir`` for ``cfg``.

    ``status``: "missing" (none), "incomplete" (a model without its ``sft.json`` record: the
    writer was killed), "legacy" (a record without a settings key: an older grpolab),
    "match" or "differs" (``differences`` lists ``key: old -> new``, :func:`warm_start_key`).
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").exists():
        return "missing", []  # (a killed warm start's OUT.partial/ is resumed by the warm start itself)
    try:
        saved = json.loads((model_dir / "sft.json").read_text())
    except (OSError, ValueError):
        return "incomplete", []
    if not isinstance(saved, dict) or saved.get("key") is None:
        return "legacy", []
    diffs = _differences(saved["key"], json.loads(json.dumps(warm_start_key(cfg))))
    return ("match", []) if not diffs else ("differs", diffs)


def snapshots_dir(out: str | os.PathLike) -> Path:
    """Where the warm start whose final output is ``out`` keeps its snapshots (``sft.snapshot_every``):
    the sibling folder ``OUT.snapshots`` (``RUN_DIR/sft`` -> ``RUN_DIR/sft.snapshots``)."""
    out = Path(os.path.abspath(out))
    return out.with_name(out.name + ".snapshots")


def in_progress_dir(out: str | os.PathLike) -> Path:
    """Where the warm start whose final output is ``out`` keeps its in-progress checkpoint: the
    sibling folder ``OUT.partial`` (``RUN_DIR/sft`` -> ``RUN_DIR/sft.partial``)."""
    out = Path(os.path.abspath(out))
    return out.with_name(out.name + ".partial")


class WarmStartCheckpoint:
    """The in-progress checkpoint of one supervised warm start, and whether it may be resumed.

    It lives in :func:`in_progress_dir` of the warm start's final output and is written every
    ``sft.save_every`` steps (unset: at each check, every ``sft.eval_every`` steps; 0: never) by
    :func:`grpolab.train.checkpoint.save_checkpoint`, atomically and in the RL checkpoints' layout
    (``OUT.partial/checkpoints/step_N/{model/, state.pt}`` + ``latest``; only the newest kept).
    ``state.pt`` holds :meth:`grpolab.train.sft.SFTState.state_dict` and the settings key
    (:func:`warm_start_key`). The caller removes it once the final output is complete.

    A checkpoint made with other settings is not resumed: the warm start starts over (and says so,
    naming the settings that changed), exactly as the finished warm-start cache is rebuilt rather
    than reused (:meth:`RunDir.warm_start_status`). It is replaced at the new run's first save.
    """

    def __init__(self, out: str | os.PathLike, cfg: Config, *, log: Callable[[str], None] = print) -> None:
        self.path = in_progress_dir(out)
        self.key = json.loads(json.dumps(warm_start_key(cfg)))  # as it reads back: tuples -> lists
        self.save_every = cfg.sft.eval_every if cfg.sft.save_every is None else cfg.sft.save_every
        self.snapshot_every = cfg.sft.snapshot_every
        self.snapshots = snapshots_dir(out)
        self.log = log

    def __repr__(self) -> str:
        return f"WarmStartCheckpoint({str(self.path)!r}, save_every={self.save_every})"

    def load(self, model) -> dict[str, Any] | None:
        """Load the newest checkpoint's weights into ``model`` and return its warm-start state;
        None (the warm start starts from scratch) when there is none or it was made with other
        settings. Temporary folders of a writer that was killed are removed first."""
        remove_stale_temporaries(self.path / "checkpoints")
        self._drop_other_snapshots()
        ckpt = latest_checkpoint(self.path)
        if ckpt is None:
            return None
        saved = ckpt.load_state()
        diffs = _differences(saved.get("key"), self.key)
        if diffs:
            self.log(f"warm start: {self.path} was made with other settings ({'; '.join(diffs[:3])}); "
                     "starting the warm start over with these settings")
            return None
        model.load_state_dict(load_weights(ckpt.model_dir, model))
        self.log(f"warm start: resuming from its in-progress checkpoint {ckpt.path} (step {ckpt.step})")
        return saved["sft"]

    def save(self, step: int, model, tokenizer, state: dict[str, Any]) -> None:
        """Write step ``step``'s checkpoint (atomic) and drop the one before it."""
        save_checkpoint(self.path, step, model, tokenizer, {"key": self.key, "sft": state}, keep=1)

    def _drop_other_snapshots(self) -> None:
        """Remove snapshots made with other settings (they would pass for this warm start's)."""
        if not self.snapshots.is_dir():
            return
        for d in sorted(self.snapshots.glob("step_*")):
            try:
                key = json.loads((d / "snapshot.json").read_text()).get("key")
            except (OSError, ValueError):
                key = None
            if _differences(key, self.key):
                self.log(f"warm start: removing {d}, a snapshot made with other settings")
                shutil.rmtree(d, ignore_errors=True)

    def snapshot(self, step: int, model, tokenizer, info: dict[str, Any]) -> Path:
        """Keep the model as of ``step`` (HF format, atomic) in ``OUT.snapshots/step_N`` with
        ``snapshot.json`` (``info``: step, and the check's accuracy when there was one at that step).
        Unlike the in-progress checkpoint it stays after the warm start ends."""
        from grpolab.models import save_model
        from grpolab.utils.io import atomic_write_json

        path = save_model(model, tokenizer, self.snapshots / f"step_{step:06d}")
        atomic_write_json(path / "snapshot.json", {**info, "key": self.key})
        return path

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def resolve_model(path: str | os.PathLike) -> tuple[Path, Config | None]:
    """``(model_dir, run_config)`` for a path that is a model directory (config None) or a run directory."""
    p = Path(path)
    if not p.exists():
        raise RunDirError(f"{p} does not exist; pass a model directory (HF format) or a grpolab run directory")
    run = RunDir(p)
    if run.is_run():
        return run.model_dir(), run.load_config()
    if not (p / "config.json").exists():
        raise RunDirError(f"{p} is neither a model directory (no config.json) nor a grpolab run directory "
                          "(no config.yaml)")
    return p, None
