"""Every config key's help, read from its field: what values it takes and what it means.

The help is written once, on the field, in :mod:`grpolab.config` (``_key(default, meaning,
form=..., more=...)``). This module only gathers it: :data:`KEY_HELP` maps ``section.key`` to
``(form, meaning)`` -- the form of the value beyond its type ("" when the type says it all) and
one line of meaning -- and :data:`KEY_MORE` to whatever else a user of the key should know.
``grpolab config [SECTION]`` prints these next to each key's default and, for a key that names
something, the allowed names from :data:`grpolab.config.CHOICES` (the table the validators check
against); the TRL adapter's ``grpolab_credit_<key>`` arguments carry the same meaning as their
help. ``tests/commands/test_config_command.py`` checks that every key has a meaning and that the
command prints it; ``tests/docs/test_config_tables.py`` checks the docs' key tables against the
fields.
"""

from __future__ import annotations

import dataclasses
import json
import typing

from grpolab.config import CHOICES, Config, ConfigError

__all__ = ["KEY_HELP", "KEY_MORE", "key_fields", "key_rows"]


def key_fields() -> dict[str, dataclasses.Field]:
    """``{"section.key": field}`` of every config key, in the sections' and fields' order."""
    out = {}
    for section in dataclasses.fields(Config):
        for f in dataclasses.fields(section.default_factory):
            out[f"{section.name}.{f.name}"] = f
    return out


#: key -> (range or form of the value, beyond its type; "" when the type says it all), meaning
KEY_HELP: dict[str, tuple[str, str]] = {k: (f.metadata.get("form", ""), f.metadata.get("help", ""))
                                        for k, f in key_fields().items()}
#: key -> anything else a user of the key should know ("" for most)
KEY_MORE: dict[str, str] = {k: f.metadata.get("more", "") for k, f in key_fields().items()}


def key_rows(section: str | None = None) -> list[tuple[str, str, str, str]]:
    """``(key, default, allowed, meaning)`` of every config key (of one section): defaults from the
    dataclasses, names from :data:`grpolab.config.CHOICES`, the rest from
    :data:`KEY_HELP` (``grpolab config`` prints them)."""
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
    """A default as ``grpolab config`` shows it (YAML-like: null, true/false, quoted only where needed)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v) if (v == "" or "\n" in v or v != v.strip()) else v
    if isinstance(v, dict):
        return json.dumps(v) if v else "{}"
    return str(v)
