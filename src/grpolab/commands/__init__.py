"""The ``grpolab`` commands: each declares its arguments next to its code.

:mod:`grpolab.cli` builds its parser from :data:`COMMANDS` and imports nothing else of grpolab.
Each module declares its commands as :class:`~grpolab.commands.base.Command` values (name, help,
``add_arguments(parser)``, ``run(args)``); :mod:`~grpolab.commands.base` also holds the argument
types and groups several commands share. A new command: its function, its arguments and its
:class:`~grpolab.commands.base.Command` in a module here, and one entry in :data:`COMMANDS`.

Each ``*_command`` function takes plain values, calls the library, prints its result and returns
an exit code. Everything that measures a run or a model opens it through
:func:`grpolab.runs.open_run`. Problems the user can fix raise :class:`grpolab.errors.ConfigError`
(or a subclass such as :class:`grpolab.train.rundir.RunDirError`); the CLI prints those as one
``error: ...`` line and exits with code 2. ``grpolab --help`` imports every module here, so they
import the library inside their functions, never at their top.

- :mod:`~grpolab.commands.train`: ``train`` (and ``--dry-run``), ``sft``
- :mod:`~grpolab.commands.models`: ``eval``, ``models import``
- :mod:`~grpolab.commands.preflight`: ``preflight``
- :mod:`~grpolab.commands.sweep`: ``sweep``, ``compare``
- :mod:`~grpolab.commands.diagnose`: ``diagnose``
- :mod:`~grpolab.commands.credit`: ``credit``
- :mod:`~grpolab.commands.config`: ``config``

Importing this package loads no torch (tested), so the command line checks the environment variables
first (:func:`~grpolab.utils.envvars.check_environment`; a bad ``OMP_NUM_THREADS`` is then grpolab's one
error line, not libgomp's).
"""

import grpolab.utils.offline  # noqa: F401  (first: no Hub lookup or telemetry from any command; docs/faults.md)
from grpolab.commands.base import Command
from grpolab.commands.config import CONFIG, config_command
from grpolab.commands.credit import CREDIT, credit_command
from grpolab.commands.diagnose import DIAGNOSE, diagnose_command
from grpolab.commands.models import EVAL, MODELS, eval_command, models_import_command
from grpolab.commands.preflight import PREFLIGHT, preflight_command
from grpolab.commands.sweep import COMPARE, SWEEP, compare_command, sweep_command
from grpolab.commands.train import SFT, TRAIN, dry_run, sft_command, train_command
from grpolab.errors import ConfigError
from grpolab.utils.envvars import check_environment

#: Every command, in the order ``grpolab --help`` lists them.
COMMANDS: tuple[Command, ...] = (TRAIN, SFT, EVAL, PREFLIGHT, SWEEP, COMPARE, DIAGNOSE, CREDIT, CONFIG, MODELS)

__all__ = ["COMMANDS", "Command", "ConfigError", "check_environment", "compare_command", "config_command", "credit_command",
           "diagnose_command", "dry_run", "eval_command", "models_import_command", "preflight_command", "sft_command",
           "sweep_command", "train_command"]
