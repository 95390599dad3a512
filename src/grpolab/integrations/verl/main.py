"""``python -m grpolab.integrations.verl.main``: verl's ``main_ppo`` with grpolab's credit extension.

Takes the arguments of ``python -m verl.trainer.main_ppo``: ``--config-path`` / ``--config-name``
(default: verl's own ``ppo_trainer`` config) and Hydra overrides. With a ``grpolab.credit``
section (``+grpolab.credit.name=rlsd +grpolab.credit.privileged_key=solution``) the run uses
RLSD / GEAR (:mod:`grpolab.integrations.verl.credit`); without one it is plain verl (grpolab's
losses and estimators are registered by the plug-in either way).

Before Ray or any worker starts, on the driver, it checks -- and stops with one ``error: ...``
line and exit code 2 -- that verl is a 0.9.x release, that the ``grpolab.credit`` section is
valid, that verl's v1 trainer is on, and that every row of the training parquet files carries the
privileged text. Then it runs verl's ``validate_config`` (with the reference worker counted when
``teacher=frozen``) and ``run_ppo`` with :class:`~grpolab.integrations.verl.runner.GrpolabTaskRunner`.

Unlike verl's ``@hydra.main`` entry point this composes the config with Hydra's compose API: the
working directory does not change (relative paths stay relative to where you launch).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Sequence

from grpolab.integrations.verl.credit import (
    CONFIG_KEY,
    VerlCreditConfig,
    VerlVersionError,
    check_verl_version,
    privileged_text,
)


def parse_args(argv: Sequence[str]) -> tuple[str | None, str, list[str]]:
    """``(config_path | None, config_name, overrides)`` from main_ppo-style arguments."""
    config_path, config_name, overrides = None, "ppo_trainer", []
    args = list(argv)
    i = 0
    while i < len(args):
        a = args[i]
        for flag in ("--config-path", "--config-name", "-cp", "-cn"):
            if a == flag or a.startswith(flag + "="):
                if a == flag:
                    if i + 1 >= len(args):
                        raise ValueError(f"{flag} needs a value")
                    value = args[i + 1]
                    i += 1
                else:
                    value = a.split("=", 1)[1]
                if flag in ("--config-path", "-cp"):
                    config_path = value
                else:
                    config_name = value
                break
        else:
            if a.startswith("-"):
                raise ValueError(f"unknown option {a!r}; pass --config-path, --config-name and Hydra overrides "
                                 "(key=value, +key=value)")
            overrides.append(a)
        i += 1
    return config_path, config_name, overrides


def compose_config(config_path: str | None, config_name: str, overrides: Sequence[str]):
    """The verl config, composed like ``main_ppo`` would (verl's config dir when no path is given)."""
    from hydra import compose, initialize_config_dir

    if config_path is None:
        import verl.trainer

        config_dir = Path(verl.trainer.__file__).resolve().parent / "config"
    else:
        config_dir = Path(config_path).expanduser().resolve()
        if not config_dir.is_dir():
            raise FileNotFoundError(f"--config-path {config_path!r} is not a directory")
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))


def _files(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def check_privileged_data(train_files: Any, key: str) -> int:
    """Check that every row of the parquet ``train_files`` has a non-empty ``extra_info[key]``.

    Returns the number of rows checked. Files that are not parquet are skipped (verl's dataset
    then fails at the first step that lacks the key, with the same message).
    """
    import pyarrow.parquet as pq

    n = 0
    for f in _files(train_files):
        path = os.path.expanduser(f)
        if not path.endswith(".parquet"):
            continue
        if not os.path.exists(path):
            raise FileNotFoundError(f"data.train_files: {f} does not exist")
        schema = pq.read_schema(path)
        if "extra_info" not in schema.names:
            raise KeyError(
                f"{f} has no extra_info column; grpolab credit reads the privileged text from "
                f"extra_info[{key!r}] of every row (examples/verl/prepare_math.py writes it)"
            )
        infos = pq.read_table(path, columns=["extra_info"]).column("extra_info").to_pylist()
        for i, info in enumerate(infos):
            try:
                privileged_text(info, key, row=i)
            except KeyError as e:
                raise KeyError(f"{f}: {e.args[0]}") from None
        n += len(infos)
    return n


def prepare(config) -> VerlCreditConfig | None:
    """All driver-side checks; the credit config (or None when the run has no ``grpolab.credit``)."""
    from omegaconf import OmegaConf

    cfg = VerlCreditConfig.from_verl_config(config)
    if cfg is None:
        return None
    if not bool(OmegaConf.select(config, "trainer.use_v1", default=False)):
        raise ValueError(f"{CONFIG_KEY} extends verl's v1 trainer: set trainer.use_v1=true")
    if OmegaConf.select(config, "data.custom_cls.path", default=None):
        import warnings

        warnings.warn("data.custom_cls is set: the privileged-text check of the training files is skipped; "
                      "the first step fails if a row lacks it", stacklevel=2)
    else:
        check_privileged_data(OmegaConf.select(config, "data.train_files"), cfg.privileged_key)
    return cfg


def run(config, cfg: VerlCreditConfig | None) -> None:
    """verl's checks and ``run_ppo`` with grpolab's task runner."""
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from grpolab.integrations.verl.runner import remote_task_runner

    auto_set_device(config)
    use_ref = need_reference_policy(config) or (cfg is not None and cfg.teacher == "frozen")
    validate_config(config=config, use_reference_policy=use_ref, use_critic=need_critic(config))
    run_ppo(config, task_runner_class=remote_task_runner())


def main(argv: Sequence[str] | None = None) -> int:
    """The command: 0 on success, 2 (and one ``error: ...`` line) when a check fails."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        check_verl_version()  # before anything imports verl
    except VerlVersionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        config = compose_config(*parse_args(argv))
        cfg = prepare(config)
    except (ValueError, KeyError, FileNotFoundError, HydraException, OmegaConfBaseException) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
        print(f"error: {msg}", file=sys.stderr)
        return 2
    run(config, cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
