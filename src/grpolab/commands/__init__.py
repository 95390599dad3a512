"""The ``grpolab`` commands, one function per command; :mod:`grpolab.cli` only parses arguments.

Each function takes plain values, calls the library, prints its result and returns an exit code.
Problems the user can fix raise :class:`grpolab.config.ConfigError` (or a subclass such as
:class:`grpolab.train.rundir.RunDirError`); the CLI prints those as one ``error: ...`` line and
exits with code 2.
"""

from grpolab.commands.inspect import credit_command, diagnose_command
from grpolab.commands.models import eval_command, headroom_command
from grpolab.commands.train import sft_command, train_command

__all__ = ["credit_command", "diagnose_command", "eval_command", "headroom_command", "sft_command",
           "train_command"]
