"""``grpolab config [SECTION]`` (every key with its default, allowed values and meaning) and
``grpolab train --dry-run`` (the resolved config, nothing run)."""

from __future__ import annotations

from typing import Callable

from grpolab.config import load_config

__all__ = ["config_command", "dry_run", "key_rows", "resume_hint", "train_run_dir"]


def train_run_dir(config: str | None, overrides: list[str], resume: str | None) -> str:
    """The run directory ``grpolab train`` writes with these arguments ("RUN_DIR" when the config
    does not load): for hints such as the one printed on Ctrl-C."""
    if resume:
        return resume
    try:
        return str(load_config(config, overrides).trainer.run_dir)
    except Exception:  # a hint must never fail
        return "RUN_DIR"


def resume_hint(run_dir: str) -> str:
    """``resume with `grpolab train --resume RUN_DIR` (continues from its last checkpoint, step N)``."""
    try:
        from grpolab.train.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(run_dir)
    except Exception:  # noqa: BLE001 - a hint must never fail; it names what it can
        ckpt = None
    where = f" (continues from its last checkpoint, step {ckpt.step})" if ckpt is not None else ""
    return f"resume with `grpolab train --resume {run_dir}`{where}"


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


def dry_run(config: str | None, overrides: list[str], resume: str | None = None, *, overwrite: bool = False,
            log: Callable[[str], None] = print) -> int:
    """Print the config ``grpolab train`` would run with (YAML, presets and overrides applied;
    with ``resume`` the run's saved config merged with them) after every check ``grpolab train``
    runs before its work (:func:`grpolab.train.checks.check_train`: run directory, device, data,
    model files and tokenizer, prompt lengths); nothing is trained or written."""
    import yaml

    from grpolab.commands.train import resolve_train_config
    from grpolab.train.checks import check_train

    cfg = resolve_train_config(config, overrides, resume=resume, overwrite=overwrite)
    check_train(cfg, resume=bool(resume), overwrite=overwrite)
    log(f"# grpolab train --dry-run: the resolved config (run directory {cfg.trainer.run_dir}); every check "
        "`grpolab train` runs first passed; nothing was run")
    log(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False).rstrip())
    return 0
