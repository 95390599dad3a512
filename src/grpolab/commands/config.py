"""``grpolab config [SECTION]`` (every key with its default, allowed values and meaning) and
``grpolab train --dry-run`` (the resolved config, nothing run)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from grpolab.config import load_config

__all__ = ["train_run_dir"]


def train_run_dir(config: str | None, overrides: list[str], resume: str | None) -> str:
    """The run directory ``grpolab train`` writes with these arguments ("RUN_DIR" when the config
    does not load): for hints such as the one printed on Ctrl-C."""
    if resume:
        return resume
    try:
        return str(load_config(config, overrides).trainer.run_dir)
    except Exception:  # a hint must never fail
        return "RUN_DIR"
