"""``grpolab config [SECTION]``: every config key with its default, allowed values and meaning."""

from __future__ import annotations

import argparse
from typing import Callable

from grpolab.commands.base import Command

__all__ = ["CONFIG", "config_command", "key_rows"]


def key_rows(section: str | None = None) -> list[tuple[str, str, str, str]]:
    """``(key, default, allowed, meaning)`` of every config key (of one section): defaults from the
    dataclasses, names from :data:`grpolab.config.CHOICES`, the rest from
    :data:`grpolab.config_help.KEY_HELP`."""
    import dataclasses
    import typing

    from grpolab.config import CHOICES, Config, ConfigError
    from grpolab.config_help import KEY_HELP

    sections = [f.name for f in dataclasses.fields(Config)]
    if section is not None and section not in sections:
        raise ConfigError(f"grpolab config {section}: no such section; sections: {', '.join(sections)}")
    rows = []
    for name in sections if section is None else [section]:
        cls = typing.get_type_hints(Config)[name]
        hints = typing.get_type_hints(cls)
        default = cls()
        for f in dataclasses.fields(cls):
            key = f"{name}.{f.name}"
            form, meaning = KEY_HELP.get(key, ("", ""))
            tp = hints[f.name]
            kind = {bool: "true/false", int: "int", float: "number", str: "text"}.get(tp, "")
            if typing.get_origin(tp) is dict:
                kind = "mapping"
            elif not kind:
                args = [a for a in typing.get_args(tp) if a is not type(None)]
                kind = {int: "int", float: "number", str: "text"}.get(args[0], "") if args else ""
            if key in CHOICES:
                allowed = "one of: " + ", ".join(repr(c) if c == "" else str(c) for c in CHOICES[key]())
            else:
                allowed = kind + (f", {form}" if form else "")
            rows.append((key, _show(getattr(default, f.name)), allowed, meaning))
    return rows


def _show(v) -> str:
    import json

    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v) if (v == "" or "\n" in v or v != v.strip()) else v
    if isinstance(v, dict):
        return json.dumps(v) if v else "{}"
    return str(v)


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
