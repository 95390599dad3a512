"""Disk space: checked against the checkpoints' size before the work, and a full disk named.

A full disk used to show as a C++ ``unexpected pos`` from ``torch.save`` after the steps had run.
Now :func:`check_free_space` compares the free space of the run directory's file system with
what the run's checkpoints will take (:func:`checkpoint_bytes`) before the warm start and the
first step, and :func:`disk_full_named` turns a write that fails for want of space, wherever the
trainer writes (checkpoints, ``metrics.jsonl``, ``completions.jsonl``, ``final/``, the report),
into one :class:`DiskFullError` line: ``disk full at PATH``, the last complete checkpoint, and
how to go on. Checkpoints are written to a temporary folder and renamed, so the one before stays
intact and a resume after freeing space is exact.
"""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import torch

from grpolab.errors import ConfigError

__all__ = ["DiskFullError", "check_free_space", "check_warm_start_space", "checkpoint_bytes",
           "disk_full_named", "is_disk_full", "model_bytes"]

#: room for the tokenizer, the config files and the RNG state of one checkpoint, and the logs
OVERHEAD_BYTES = 4 << 20
_FULL_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}
#: how a full disk reads when the writer does not pass the OS error on (torch.save's C++ writer)
_FULL_WORDS = ("no space left", "unexpected pos", "file write failed", "os error 28", "disk quota")


class DiskFullError(ConfigError):
    """Not enough disk space for the run, found up front or when a write failed."""


def checkpoint_bytes(weights: int, trainable: int, *, keep: int) -> int:
    """Bytes the run's checkpoints take at most: ``keep + 1`` checkpoints (the newest is written
    before the oldest is removed), each the ``weights`` bytes plus AdamW's two moments of the
    ``trainable`` bytes, and ``final/``."""
    return (keep + 1) * (weights + 2 * trainable + OVERHEAD_BYTES) + weights + OVERHEAD_BYTES


def model_bytes(model: torch.nn.Module, *, lora: bool = False) -> tuple[int, int]:
    """``(weights, trainable)`` bytes of ``model`` (with LoRA the adapters are small: trainable 0)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return weights, 0 if lora else weights


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def check_free_space(path: str | os.PathLike, need: int, *, keep: int, holds: str | None = None,
                     fix: str | None = None) -> None:
    """Refuse (:class:`DiskFullError`) when the file system of ``path`` (or its nearest existing
    parent) has less than ``need`` bytes free. ``holds`` says what the bytes are for and ``fix``
    how to go on (default: a run's checkpoints, with ``keep`` = ``trainer.keep_checkpoints``)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    free = shutil.disk_usage(p).free
    if free < need:
        holds = holds or (f"the run's checkpoints take about {_mib(need)} (trainer.keep_checkpoints={keep} plus the "
                          "one being written, and final/)")
        fix = fix or "free space there, lower trainer.keep_checkpoints, or pick another trainer.run_dir"
        raise DiskFullError(f"not enough disk space at {path}: {_mib(free)} free, {holds.format(need=_mib(need))}; "
                            f"{fix}")


def check_warm_start_space(out: str | os.PathLike, weights: int, trainable: int, *, snapshots: int = 0) -> None:
    """:func:`check_free_space` for ``grpolab sft --out OUT``: its in-progress checkpoint in
    ``OUT.partial`` (the newest kept, one more while it is written), ``snapshots`` kept snapshots
    (``sft.snapshot_every``) and the finished model in ``OUT``."""
    need = checkpoint_bytes(weights, trainable, keep=1) + snapshots * (weights + OVERHEAD_BYTES)
    check_free_space(out, need, keep=1, fix="free space there or pick another --out", holds=(
        "the warm start takes about {need} (its in-progress checkpoint in OUT.partial, one more while it is "
        f"written{f', {snapshots} snapshots' if snapshots else ''}, and the finished model)"))


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed for want of space (the OS error, or its C++/Rust wording)."""
    if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
        return True
    return isinstance(exc, (OSError, RuntimeError)) and any(w in str(exc).lower() for w in _FULL_WORDS)


@contextmanager
def disk_full_named(run_dir: str | os.PathLike, *, checkpoints: str | os.PathLike | None = None,
                    again: str | None = None) -> Iterator[None]:
    """Within the block, a write that fails for want of space raises :class:`DiskFullError`
    naming the path, the last complete checkpoint (of ``checkpoints``, default ``run_dir``) and
    how to go on (``again``, default the ``grpolab train --resume`` command)."""
    try:
        yield
    except (OSError, RuntimeError) as e:
        if not is_disk_full(e):
            raise
        from grpolab.train.checkpoint import latest_checkpoint

        where = getattr(e, "filename", None) or run_dir
        ckpt = latest_checkpoint(checkpoints if checkpoints is not None else run_dir)
        kept = f"the last complete checkpoint is step {ckpt.step}" if ckpt is not None else "no checkpoint was written"
        again = again or f"continue with `grpolab train --resume {run_dir}`"
        raise DiskFullError(
            f"disk full at {where}: the write failed ({' '.join(str(e).split())[:120]}); {kept}. Free space "
            f"and {again}") from None
