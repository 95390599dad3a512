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
"""

from grpolab.config import ConfigError
from grpolab.commands.config import config_command, dry_run, resume_hint, train_run_dir
from grpolab.commands.credit import credit_command
from grpolab.commands.diagnose import diagnose_command
from grpolab.commands.models import eval_command, models_import_command
from grpolab.commands.preflight import preflight_command
from grpolab.commands.sweep import compare_command, sweep_command
from grpolab.commands.train import sft_command, train_command

__all__ = ["ConfigError", "compare_command", "config_command", "dry_run", "credit_command", "diagnose_command", "eval_command",
           "models_import_command", "preflight_command", "sft_command", "resume_hint", "sweep_command", "train_command",
           "train_run_dir"]
