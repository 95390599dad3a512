"""``grpolab train`` and ``grpolab sft``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from grpolab.config import load_config


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
