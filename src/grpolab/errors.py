"""The error a user can fix: a leaf module (imports nothing of grpolab), so any room can raise it.

:class:`ConfigError` is raised by library code for a bad setting, input or environment, with a
message that names the problem and the fix; only the CLI turns it into one ``error: ...`` line and
exit code 2 (``grpolab.cli``). :mod:`grpolab.config` re-exports it, so
``from grpolab.config import ConfigError`` keeps working.
"""

from __future__ import annotations

__all__ = ["ConfigError", "Interrupted"]


class ConfigError(ValueError):
    """A configuration problem, reported before any work starts."""


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM or SIGHUP) that the trainer received: handled like Ctrl-C.

    The trainer's signal handlers raise it (:mod:`grpolab.train.signals`); a ``KeyboardInterrupt``
    that is not one of these, raised by a user's reward function, is that reward's failure."""

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
