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

from grpolab.config import Config

__all__ = ["KEY_HELP", "KEY_MORE", "key_fields"]


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
