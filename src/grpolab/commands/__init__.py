"""The ``grpolab`` commands, one function per command.

:mod:`grpolab.cli` only parses arguments and imports from here.

Each function takes plain values, calls the library, prints its result and returns an exit code.
Everything that measures a run or a model opens it through :func:`grpolab.runs.open_run`.
Problems the user can fix raise :class:`grpolab.config.ConfigError` (or a subclass such as
:class:`grpolab.train.rundir.RunDirError`); the CLI prints those as one ``error: ...`` line and
exits with code 2.

- :mod:`~grpolab.commands.train`: ``train``, ``sft``
- :mod:`~grpolab.commands.models`: ``eval``, ``models import``
- :mod:`~grpolab.commands.preflight`: ``preflight``
- :mod:`~grpolab.commands.diagnose`: ``diagnose``
- :mod:`~grpolab.commands.credit`: ``credit``
- :mod:`~grpolab.commands.sweep`: ``sweep``, ``compare``

The command functions load on first use (a module ``__getattr__``): importing this package loads
no torch, so that the command line checks the environment variables first
(:func:`~grpolab.utils.envvars.check_environment`; a bad ``OMP_NUM_THREADS`` is then grpolab's one
error line, not libgomp's).
"""

import importlib

from grpolab.config import ConfigError
from grpolab.utils.envvars import check_environment

#: each command function's module in this package
_HOMES = {
    "config_command": "config", "dry_run": "config", "resume_hint": "config", "train_run_dir": "config",
    "credit_command": "credit", "diagnose_command": "diagnose", "eval_command": "models",
    "models_import_command": "models", "preflight_command": "preflight", "compare_command": "sweep",
    "sweep_command": "sweep", "sft_command": "train", "train_command": "train",
}

__all__ = ["ConfigError", "check_environment", *sorted(_HOMES)]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'grpolab.commands' has no attribute {name!r}")
    return getattr(importlib.import_module(f"grpolab.commands.{home}"), name)
