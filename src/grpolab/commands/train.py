"""``grpolab train`` (and its ``--dry-run``) and ``grpolab sft``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

from grpolab.commands.base import Command, add_config_args
from grpolab.config import load_config
from grpolab.errors import ConfigError


def train_command(config: str | None, overrides: list[str], *, resume: str | None = None,
                  overwrite: bool = False, log: Callable[[str], None] = print) -> int:
    """Train as configured; ``resume`` continues a run directory, ``overwrite`` starts one over.

    ``--resume RUN_DIR [CONFIG] [--set ...]``: the run's saved config, with the file and the
    overrides merged on top (precedence: saved < file < ``--set``); settings the checkpoints
    depend on (model shape, task, seed) cannot change. Without ``--resume``, a run directory that
    already holds checkpoints or a final model is refused unless ``overwrite``.
    """
    from grpolab.train import train
    from grpolab.train.checks import check_train

    cfg = resolve_train_config(config, overrides, resume=resume, overwrite=overwrite)
    check_train(cfg, resume=bool(resume), overwrite=overwrite)  # what --dry-run checks, before any work
    if resume:
        from grpolab.train.loop import finished_run_message
        from grpolab.train.rundir import RunDir

        done = finished_run_message(cfg, RunDir(resume))
        if done:  # a finished run resumed as it was: say so, load nothing
            log(done)
            return 0
    train(cfg, resume=bool(resume), overwrite=overwrite, log=log)
    return 0


def resolve_train_config(config: str | None, overrides: list[str], *, resume: str | None = None,
                         overwrite: bool = False):
    """The config ``grpolab train`` runs with: the file and overrides, or with ``resume`` the run's
    saved config with them merged on top (refused for a directory that is no run, or with
    ``overwrite``)."""
    from grpolab.train.rundir import RunDir, RunDirError

    if not resume:
        return load_config(config, overrides)
    run = RunDir(resume)
    if not run.is_run():
        raise RunDirError(f"--resume {run.path}: no config.yaml there; is it a grpolab run directory?")
    if overwrite:
        raise RunDirError("--resume and --overwrite contradict each other; pass one of them")
    return run.resume_config(config, overrides)


def sft_command(config: str | None, overrides: list[str], *, out: str, overwrite: bool = False,
                log: Callable[[str], None] = print) -> int:
    """Supervised warm start only; saves the model (HF format) and ``sft.json`` to ``out``.

    Progress is checkpointed to ``OUT.partial`` (``sft.save_every``): the same command run again
    after a kill continues from there. A finished warm start in ``out`` is never replaced silently:
    built with the same settings it is kept (nothing to do); built with other settings, or a model
    directory that is no warm start, the command is refused unless ``overwrite``. (A finished warm start keeps no optimizer state, so it cannot be
    extended in place; train on from it with ``--set model.path=OUT`` and another ``--out``.)"""
    from grpolab.runs import open_run
    from grpolab.train.checks import check_sft_disk_space, check_writable, tokenizer_and_context
    from grpolab.train.diskspace import disk_full_named
    from grpolab.train.loop import seed_everything
    from grpolab.train.rundir import in_progress_dir
    from grpolab.train.setup import refuse_float16, trainable_dtype
    from grpolab.train.signals import stop_signals
    from grpolab.train.warm_start import build_warm_start

    cfg = load_config(config, overrides)
    refuse_float16(cfg.model)  # the warm start takes optimizer steps too
    if _keep_or_refuse(out, cfg, overwrite=overwrite, log=log):
        return 0
    check_writable(out, "--out", directory=True)
    # the disk before the model loads, sized from its files (grpolab.train.diskspace), as `train` does
    check_sft_disk_space(cfg, out, None if cfg.model.path else tokenizer_and_context(cfg)[0])
    seed_everything(cfg.trainer.seed)
    run = open_run(None, cfg, train_items=True, log=log)  # the model sft.* trains, its prompt format
    model = trainable_dtype(cfg.model, run.model, log=log)  # a float16 checkpoint trains in float32
    # SIGTERM and SIGHUP stop it like Ctrl-C (the hint: run the same command again); a full disk is named
    with stop_signals(), disk_full_named(out, checkpoints=in_progress_dir(out),
                                         again="run the same `grpolab sft` command again (it goes on from there)"):
        saved, res = build_warm_start(cfg, model, run.tokenizer, run.train_items, run.eval_items, out, log=log,
                                      collector=run.collector)
    log(f"saved warm-started model to {saved} ({res.steps} steps, greedy accuracy {res.accuracy:.3f} on "
        f"{'validation' if cfg.sft.select_on == 'validation' else 'held-out'} items)")
    return 0


def _keep_or_refuse(out: str, cfg, *, overwrite: bool, log: Callable[[str], None]) -> bool:
    """True when ``out`` already holds this warm start (nothing to do); raises when it holds
    something else that ``overwrite`` would replace."""
    from grpolab.train.rundir import RunDirError, in_progress_dir
    from grpolab.train.warm_start import warm_start_status

    status, diffs = warm_start_status(out, cfg)
    if status == "match" and not overwrite:
        record = json.loads((Path(out) / "sft.json").read_text())
        log(f"{out} already holds this warm start ({record.get('steps')} steps, greedy accuracy "
            f"{record.get('accuracy', float('nan')):.3f}), built with the same settings; nothing to do "
            f"(--overwrite builds it again)")
        return True
    # a model without sft.json is a warm start whose writer was killed only if its in-progress
    # checkpoint is still there; otherwise it is someone's model directory
    foreign = status == "incomplete" and not in_progress_dir(out).exists()
    if (status in ("differs", "legacy") or foreign) and not overwrite:
        what = {"differs": "a finished warm start built with other settings "
                           f"({'; '.join(diffs[:4])}{'; ...' if len(diffs) > 4 else ''})",
                "legacy": "a finished warm start with no settings record (an older grpolab)",
                "incomplete": "a model that is not a grpolab warm start (no sft.json)"}[status]
        raise RunDirError(
            f"{out} holds {what}. Write this one elsewhere with --out PATH, rebuild {out} with these "
            f"settings with --overwrite, or train on from it with --set model.path={out} --out NEW (a new "
            f"optimizer and learning-rate schedule: a finished warm start keeps no optimizer state)")
    return False


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


def dry_run(config: str | None, overrides: list[str], resume: str | None = None, *, overwrite: bool = False,
            log: Callable[[str], None] = print) -> int:
    """Print the config ``grpolab train`` would run with (YAML, presets and overrides applied;
    with ``resume`` the run's saved config merged with them) after every check ``grpolab train``
    runs before its work (:func:`grpolab.train.checks.check_train`: run directory, device, data,
    model files and tokenizer, prompt lengths); nothing is trained or written."""
    import yaml

    from grpolab.train.checks import check_train

    cfg = resolve_train_config(config, overrides, resume=resume, overwrite=overwrite)
    check_train(cfg, resume=bool(resume), overwrite=overwrite)
    log(f"# grpolab train --dry-run: the resolved config (run directory {cfg.trainer.run_dir}); every check "
        "`grpolab train` runs first passed; nothing was run")
    log(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False).rstrip())
    return 0


def _train_arguments(t: argparse.ArgumentParser) -> None:
    add_config_args(t)
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint; a CONFIG "
                   "file and --set values are merged into its saved config (saved < file < --set)")
    t.add_argument("--overwrite", action="store_true", help="start over in a run directory that holds a run "
                   "(deleted only once the new config's model and data load; a warm start built with the "
                   "same settings is kept)")
    t.add_argument("--dry-run", action="store_true", help="run every check `grpolab train` runs first (run "
                   "directory, data, model files, prompt lengths), print the resolved config (presets, file, --set "
                   "and, with --resume, the saved config applied) and exit without training or writing anything")


def _train(args: argparse.Namespace) -> int:
    if args.resume is not None and not Path(args.resume).is_dir():
        raise ConfigError(f"--resume {args.resume}: {'is a file, not' if Path(args.resume).exists() else 'there is no'} "
                          "run directory there; give a directory that `grpolab train` wrote (it holds config.yaml)")

    if args.dry_run:
        return dry_run(args.config, args.overrides, args.resume, overwrite=args.overwrite)
    return train_command(args.config, args.overrides, resume=args.resume, overwrite=args.overwrite)


def _sft_arguments(s: argparse.ArgumentParser) -> None:
    add_config_args(s)
    s.add_argument("--out", default="runs/sft", help="where to save the model (HF format)")
    s.add_argument("--overwrite", action="store_true", help="rebuild OUT when it holds a finished warm start "
                   "(by default one built with the same settings is kept, one with other settings refused)")


def _sft(args: argparse.Namespace) -> int:
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out} is a file; give a directory to write the warm-started model to")

    return sft_command(args.config, args.overrides, out=args.out, overwrite=args.overwrite)


TRAIN = Command("train", "RL-train a policy (default: the built-in tiny model on 'arith')", _train_arguments, _train,
                interrupted=lambda args: resume_hint(train_run_dir(args.config, args.overrides, args.resume)))
SFT = Command("sft", "supervised warm start of the tiny model on task demonstrations", _sft_arguments, _sft,
              interrupted=lambda args: "run the same `grpolab sft` command again to continue from its last "
                                       "checkpoint (sft.save_every)")
