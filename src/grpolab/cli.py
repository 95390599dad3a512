"""The ``grpolab`` command: parse arguments and call :mod:`grpolab.commands`. No logic of its own.

Errors the user can fix (:class:`grpolab.config.ConfigError` and its subclasses) become one
``error: ...`` line on stderr and exit code 2; ``--debug`` shows their traceback instead. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys

from grpolab import __version__


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that ends with ``(default: X)`` for every option with a value default its text does not
    already explain."""

    def _get_help_string(self, action):
        text = action.help or ""
        d = action.default
        if (not action.option_strings or d is None or d is False or d == [] or d is argparse.SUPPRESS
                or "default" in text):
            return text
        return f"{text} (default: {str(d).replace('%', '%%')})"


class _Parser(argparse.ArgumentParser):
    """argparse with one ``error: ...`` line (exit code 2) for a bad argument, like a config error,
    and every option's default in its help."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"error: {self.prog}: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    """``grpolab``'s parser: its own options and one subparser per :data:`grpolab.commands.COMMANDS`
    entry, each declaring its arguments itself."""
    from grpolab.commands import COMMANDS

    p = _Parser(prog="grpolab", description="RL with verifiable rewards (GRPO family) "
                                "for causal language models.")
    p.add_argument("--version", action="version", version=f"grpolab {__version__}")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        _add_subparser(sub, command)
    return p


def _add_subparser(sub, command) -> None:
    """One command's parser (and its actions' parsers): its arguments, then ``--debug``."""
    parser = sub.add_parser(command.name, help=command.help)
    if command.actions:
        actions = parser.add_subparsers(dest=f"{command.name}_command", metavar="ACTION", required=True)
        for action in command.actions:
            _add_subparser(actions, action)
    else:
        command.add_arguments(parser)
        parser.set_defaults(func=command.run)
    # `grpolab COMMAND ... --debug` works too
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback of an error")


def _quiet_transformers() -> None:
    """No per-file progress bars or info chatter from transformers on the command line."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    from grpolab.commands import COMMANDS, ConfigError, check_environment

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        check_environment()  # every variable grpolab reads, before torch loads (grpolab.utils.envvars)
        _quiet_transformers()
        return args.func(args)
    except ConfigError as e:  # a problem the user can fix: one line, exit code 2
        if args.debug:
            raise
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `grpolab ... | head`: the reader has what it wanted; no traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit flush must not fail again
        return 0
    except KeyboardInterrupt as e:  # Ctrl-C; in `train` also SIGTERM and SIGHUP (grpolab.train.signals)
        name = getattr(e, "signal_name", "SIGINT")
        said = "interrupted" if name == "SIGINT" else f"stopped by {name}"
        hint = next((c.interrupted for c in COMMANDS if c.name == args.command), None)  # e.g. how to resume
        print(f"{said}; {hint(args)}" if hint else said, file=sys.stderr)
        import signal

        return 128 + int(getattr(signal, name, signal.SIGINT))


if __name__ == "__main__":
    sys.exit(main())
