"""What a ``grpolab`` command is (:class:`Command`) and the arguments several commands share.

Each module under ``grpolab/commands/`` declares its commands next to their code: a :class:`Command`
with the name and the one-line help ``grpolab --help`` lists, ``add_arguments(parser)`` declaring its
arguments and ``run(args) -> exit code``; :data:`grpolab.commands.COMMANDS` lists them in the order
``grpolab --help`` shows them and :mod:`grpolab.cli` builds the parser from that list. A new command is
one :class:`Command` in its module and one entry there.

``grpolab --help`` loads every command module, so this module and the command modules import nothing
heavy at their top (no torch): a command imports the library inside ``run``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

__all__ = ["COUNT", "NEW_TOKENS", "POSITIVE_INT", "SECONDS", "TEMPERATURE", "UNIT", "Command", "add_config_args",
           "add_model_or_run", "number"]


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command (or a command with actions) that declares no arguments of its own."""


@dataclass(frozen=True)
class Command:
    """One ``grpolab`` command.

    ``name`` and ``help``: as ``grpolab --help`` lists them; ``add_arguments(parser)``: declares its
    arguments on its own parser; ``run(args)``: runs it and returns the exit code. ``actions``: the
    commands under it (``grpolab models import``; the command itself then has no ``run``).
    ``interrupted(args)``: what to tell the user after Ctrl-C (or SIGTERM/SIGHUP), e.g. how to
    resume; None: nothing beyond "interrupted"."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    run: Callable[[argparse.Namespace], int] | None = None
    actions: tuple[Command, ...] = ()
    interrupted: Callable[[argparse.Namespace], str] | None = None

    def __post_init__(self) -> None:
        if (self.run is None) == (not self.actions):
            raise ValueError(f"command {self.name!r}: give either run or actions (a command with actions runs "
                             "one of them)")


def number(kind, *, low=None, high=None, low_open=False, what=""):
    """An argparse type: ``kind`` (int or float) within ``[low, high]`` (``(low, ...`` with ``low_open``)."""

    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'a whole number' if kind is int else 'a number'}") \
                from None
        if kind is float and v != v:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number")
        bad = (low is not None and (v <= low if low_open else v < low)) or (high is not None and v > high)
        if bad:
            rng = (f"> {low}" if low_open else f">= {low}") if high is None else \
                f"in {'(' if low_open else '['}{low}, {high}]"
            raise argparse.ArgumentTypeError(f"{text} is not allowed: must be {rng}{what}")
        return v

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


POSITIVE_INT = number(int, low=1)
COUNT = number(int, low=0)
SECONDS = number(float, low=0)
TEMPERATURE = number(float, low=0, low_open=True, what=" (greedy decoding is --samples 0)")
NEW_TOKENS = number(int, low=1, what=" (the longest response, in tokens)")
UNIT = number(float, low=0, high=1)


def add_config_args(p: argparse.ArgumentParser) -> None:
    """``CONFIG`` (a YAML file, optional) and ``--set KEY=VALUE``: the commands that run training."""
    p.add_argument("config", nargs="?", help="YAML config (sections: model, task, sft, rollout, objective, "
                   "optim, trainer, log, credit, env; `grpolab config` lists every key with its default); "
                   "defaults are used for anything not given")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set objective.aggregation=balanced "
                   "(repeatable; 'preset=ctpo' applies a named preset)")


def add_model_or_run(p: argparse.ArgumentParser, *, config_help: str, optional: bool = False) -> None:
    """``MODEL`` (a model directory or a run directory; with ``optional`` it may be left out), ``--config``
    (``config_help`` says what the command takes from it) and ``--set KEY=VALUE``: the commands that
    measure a model as a run would (:func:`grpolab.runs.open_run`)."""
    what = "a model directory (HF format) or a grpolab run directory"
    if optional:
        p.add_argument("model", nargs="?", default=None,
                       help=what + " (default: the config's model.path, else the tiny model)")
    else:
        p.add_argument("model", help=what)
    p.add_argument("--config", default=None, help=config_help)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a --config value (repeatable; also works without --config)")
