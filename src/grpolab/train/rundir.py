"""The run directory and its one owner: :class:`RunDir`.

Layout::

    RUN_DIR/config.yaml      the run's config (written only after its model and data loaded)
    RUN_DIR/sft/             the cached warm start (HF model) + sft.json (its settings key)
    RUN_DIR/sft.partial/     the warm start's in-progress checkpoint while it trains (see
                             WarmStartCheckpoint); removed once sft/ is complete
    RUN_DIR/checkpoints/     step_NNNNNN/{model/, state.pt} and ``latest`` (see checkpoint.py)
    RUN_DIR/final/           the trained model (HF format)
    RUN_DIR/metrics.jsonl    one row per step; tb/ plots/ summary.{md,json} preflight.{json,md}

:meth:`RunDir.model_dir` is the one answer to "which model does this run hold" (used by
``grpolab eval``, ``preflight``, ``diagnose`` and ``credit`` through :func:`grpolab.runs.open_run`).
The warm start's cache and in-progress checkpoint (``sft/``, ``sft.partial/``, ``sft.snapshots/``)
are kept by :mod:`grpolab.train.warm_start`. Problems a user can fix raise :class:`RunDirError`
with the fix in the message.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from grpolab.config import Config, ConfigError, config_from_dict
from grpolab.train.checkpoint import Checkpoint, latest_checkpoint, remove_stale_temporaries
from grpolab.utils.io import atomic_write_text

__all__ = ["LOCK_FILE", "MARKER", "RESUME_FIXED_KEYS", "RunDir", "RunDirError", "RunLock", "config_differences", "in_progress_dir", "resolve_model",
           "snapshots_dir"]


#: the file that marks a directory as a grpolab run (written when a run starts)
MARKER = ".grpolab-run"
#: the file whose ``flock`` one process holds while it trains in the directory; it holds that pid
LOCK_FILE = ".grpolab-lock"


class RunDirError(ConfigError):
    """A run directory that cannot be used as asked (the message says why and what to do)."""


#: Settings a resumed run cannot change: the checkpoint holds a model of this shape, trained on
#: this data in this order. (``model.path`` may change: the checkpoint holds the weights, so a
#: moved base model can be pointed to; it must still load.)
RESUME_FIXED_KEYS = ("model.hidden_size", "model.num_layers", "model.num_heads",
                     "model.intermediate_size", "model.lora", "task.name", "task.options", "task.n_train",
                     "trainer.seed")


def config_differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new), key=str):
            out += config_differences(old.get(k), new.get(k), f"{prefix}{k}.")
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
        self.created = False  # set by claim(): whether it made the directory

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
        from grpolab.config import parse_yaml_text, read_text_file

        fix = (f"rewrite it from the command that started the run (`grpolab train CONFIG --set ... --set "
               f"trainer.run_dir={self.path} --dry-run` prints its config), or start a new run")
        try:
            data = parse_yaml_text(read_text_file(self.config_file, str(self.config_file)), str(self.config_file))
            if not isinstance(data, dict):
                raise ConfigError("it does not hold a config mapping")
            return config_from_dict(data)
        except RunDirError:
            raise
        except ConfigError as e:
            raise RunDirError(f"{self.config_file} is corrupt ({str(e).removeprefix(str(self.config_file) + ' ')}); "
                              f"{fix}") from None

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
        asked = cfg.trainer.run_dir
        if asked != saved.trainer.run_dir and os.path.abspath(asked) != os.path.abspath(self.path):
            raise RunDirError(
                f"--resume {self.path} with trainer.run_dir={asked!r}: a resumed run stays in its directory; drop "
                f"trainer.run_dir to continue {self.path}, or start a new run in {asked} without --resume")
        cfg.trainer.run_dir = str(self.path)
        old, new = saved.to_dict(), cfg.to_dict()
        changed = [d for key in RESUME_FIXED_KEYS
                   for d in config_differences(old[key.split(".")[0]].get(key.split(".")[1]),
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
        if (self.final / "config.json").exists() or (self.final / "adapter_config.json").exists():
            return self.final  # a model, or a LoRA adapter (model.lora_save: adapter) load_model merges
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

    # ------------------------------------------------------------------ ownership
    @property
    def marker(self) -> Path:
        """The file that says "grpolab wrote this run directory" (:data:`MARKER`)."""
        return self.path / MARKER

    def check_owner(self) -> None:
        """Refuse (:class:`RunDirError`) a directory that is not empty and holds no grpolab run
        marker: grpolab writes (and ``--overwrite`` deletes) only in folders it created."""
        if not self.path.is_dir() or self.marker.exists():
            return
        entries = sorted(p.name for p in self.path.iterdir())
        if entries:
            shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
            raise RunDirError(
                f"trainer.run_dir={str(self.path)!r} is not empty ({shown}) and was not created by grpolab (no "
                f"{MARKER} file): grpolab never writes into or deletes files it did not create; pick a new or "
                "empty directory with --set trainer.run_dir=PATH")

    def claim(self, *, resume: bool = False) -> "RunLock":
        """Create the directory, mark it as a grpolab run and take its exclusive lock (held until
        :meth:`RunLock.release` or the process ends, whichever comes first: the kernel releases a
        dead process's lock). A directory another process holds is refused (:class:`RunDirError`
        naming its pid). ``resume`` of a directory holding a run's config.yaml: the marker is added if missing."""
        if not (resume and self.is_run()):
            self.check_owner()
        self.created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        if not self.marker.exists():
            atomic_write_text(self.marker, "This directory is a grpolab run (trainer.run_dir); "
                              "grpolab's --overwrite deletes only folders holding this file.\n")
        return RunLock.acquire(self.path / LOCK_FILE)

    def discard_unused_claim(self) -> None:
        """Remove the directory :meth:`claim` created when the run wrote nothing into it but the marker and
        the lock (a run refused before its work leaves no trace); any other directory is left as it is."""
        if self.created and self.path.is_dir() and \
                {p.name for p in self.path.iterdir()} <= {MARKER, LOCK_FILE}:
            shutil.rmtree(self.path, ignore_errors=True)

    def check_free(self) -> None:
        """Refuse a directory another process holds the lock of (what :meth:`claim` would refuse), without
        taking the lock or writing anything."""
        lock_path = self.path / LOCK_FILE
        if lock_path.exists():
            RunLock.acquire(lock_path, create=False).release()

    # ------------------------------------------------------------------ housekeeping
    def clean_stale(self) -> list[Path]:
        """Remove temporary folders and files left by a killed process (their writer is gone)."""
        return remove_stale_temporaries(self.checkpoints)

    def start_over(self, *, keep_warm_start: bool) -> list[str]:
        """Delete the previous run's outputs (``--overwrite``); the warm start too unless kept.
        Returns the names of what was there and is gone (empty: nothing to remove).

        A killed warm start's ``sft.partial/`` stays: the next warm start resumes it if it has the
        same settings, and starts over (and says so) if not."""
        dirs = ("checkpoints", "tb", "plots", "final") + (() if keep_warm_start else ("sft", "sft.snapshots"))
        files = ("metrics.jsonl", "summary.md", "summary.json")
        gone = [x for x in (*dirs, *files) if (self.path / x).exists()]
        for sub in dirs:
            shutil.rmtree(self.path / sub, ignore_errors=True)
        for f in files:
            (self.path / f).unlink(missing_ok=True)
        return gone




class RunLock:
    """An exclusive ``fcntl.flock`` on ``RUN_DIR/.grpolab-lock``, whose text is the holder's pid."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self.fd = path, fd

    @classmethod
    def acquire(cls, path: Path, *, create: bool = True) -> "RunLock":
        import fcntl

        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(
                f"{path.parent} is in use by another grpolab process (pid {holder}): two writers would overwrite "
                f"each other's checkpoints. Wait for it to finish (or stop it: kill {holder}), or pick another "
                "directory with --set trainer.run_dir=PATH") from None
        if create:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = -1


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


def resolve_model(path: str | os.PathLike) -> tuple[Path, Config | None]:
    """``(model_dir, run_config)`` for a path that is a model directory (config None) or a run directory."""
    p = Path(path)
    if not p.exists():
        raise RunDirError(f"{p} does not exist; pass a model directory (HF format) or a grpolab run directory")
    run = RunDir(p)
    if run.is_run():
        return run.model_dir(), run.load_config()
    if not (p / "config.json").exists():
        from grpolab.models.gguf import find_gguf

        if find_gguf(p) is not None:  # a .gguf file or a folder holding one: load_model reads it
            return p, None
        raise RunDirError(f"{p} is neither a model directory (no config.json), a GGUF file, nor a grpolab run "
                          "directory (no config.yaml)")
    return p, None
