"""``grpolab config [SECTION]``: every config key with its default, allowed values and meaning."""

from __future__ import annotations

import argparse
from typing import Callable

from grpolab.commands.base import Command
from grpolab.config_help import key_rows

__all__ = ["CONFIG", "config_command"]


def config_command(section: str | None = None, *, log: Callable[[str], None] = print) -> int:
    """Print every key (of ``section``) with its default, allowed values and meaning."""
    rows = key_rows(section)
    current = None
    for key, default, allowed, meaning in rows:
        sec, name = key.split(".", 1)
        if sec != current:
            if current is not None:
                log("")
            log(f"{sec}:")
            current = sec
        if len(default) > 40:
            default = default[:37] + "..."
        log(f"  {name} = {default}  [{allowed}]  {meaning}")
    return 0


def _arguments(g: argparse.ArgumentParser) -> None:
    g.add_argument("section", nargs="?", default=None,
                   help="one section: model, task, sft, rollout, objective, optim, trainer, log, credit, env")


CONFIG = Command("config", "list every config key with its default, allowed values and meaning", _arguments,
                 lambda args: config_command(args.section))
