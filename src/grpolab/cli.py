"""The ``grpolab`` command: parse arguments, build a config, call the library. No logic of its own."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from grpolab import __version__


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", nargs="?", help="YAML config (sections: model, task, sft, rollout, "
                   "objective, optim, trainer, log); defaults are used for anything not given")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set objective.aggregation=balanced "
                   "(repeatable; 'preset=ctpo' applies a named preset)")


def cmd_train(args: argparse.Namespace) -> int:
    from grpolab.config import load_config
    from grpolab.train import load_run_config, train
    from grpolab.train.checkpoint import latest_checkpoint

    if args.resume:
        run_dir = Path(args.resume)
        if not (run_dir / "config.yaml").exists():
            raise SystemExit(f"error: --resume {run_dir}: no config.yaml there; is it a grpolab run directory?")
        cfg = load_run_config(run_dir)
        if args.overrides or args.config:
            from grpolab.config import _flatten  # re-apply user overrides on top of the saved config

            cfg = load_config(overrides={**_flatten(cfg.to_dict()),
                                         **dict(o.split("=", 1) for o in args.overrides)})
        cfg.trainer.run_dir = str(run_dir)
        train(cfg, resume=True)
        return 0
    cfg = load_config(args.config, args.overrides)
    run_dir = Path(cfg.trainer.run_dir)
    if latest_checkpoint(run_dir) is not None:
        if not args.overwrite:
            raise SystemExit(
                f"error: {run_dir} already holds a run with checkpoints. Continue it with "
                f"`grpolab train --resume {run_dir}`, start over with --overwrite (keeps the cached "
                f"warm start), or pick another directory with --set trainer.run_dir=PATH"
            )
        for sub in ("checkpoints", "tb", "plots", "final"):
            shutil.rmtree(run_dir / sub, ignore_errors=True)
    train(cfg)
    return 0


def cmd_sft(args: argparse.Namespace) -> int:
    from grpolab.config import load_config
    from grpolab.models import save_model
    from grpolab.train.setup import (build_policy, build_task_splits, resolve_device, sft_from_config,
                                     write_sft_record)
    from grpolab.train.loop import seed_everything

    cfg = load_config(args.config, args.overrides)
    seed_everything(cfg.trainer.seed)
    train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed)
    model, tok, _ = build_policy(cfg.model, seed=cfg.trainer.seed, device=resolve_device(cfg.model.device))
    t0 = time.time()
    res = sft_from_config(cfg, model, tok, train_items, eval_items)
    out = save_model(model, tok, args.out)
    write_sft_record(out, cfg, res, time.time() - t0)
    print(f"saved warm-started model to {out} ({res.steps} steps, greedy accuracy {res.accuracy:.3f} on "
          f"{'validation' if cfg.sft.select_on == 'validation' else 'held-out'} items)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    import torch

    from grpolab.config import TaskConfig
    from grpolab.models import load_model
    from grpolab.train.evaluate import evaluate
    from grpolab.train.setup import build_task

    src = Path(args.model)
    task_cfg = TaskConfig(name=args.task or "arith", n_eval=args.n)
    env = None  # multi-turn runs evaluate as episodes, with the run's environment settings
    if (src / "config.yaml").exists():  # a run directory
        from grpolab.train import load_run_config
        from grpolab.train.checkpoint import latest_checkpoint

        run_cfg = load_run_config(src)
        if args.task is None:
            task_cfg = TaskConfig(name=run_cfg.task.name, options=run_cfg.task.options, n_eval=args.n)
            env = run_cfg.env if run_cfg.env.name else None
        ckpt = latest_checkpoint(src)
        src = src / "final" if (src / "final").exists() else (ckpt.model_dir if ckpt else src / "sft")
    for kv in args.task_option:
        k, v = kv.split("=", 1)
        import yaml

        task_cfg.options[k] = yaml.safe_load(v)
    model, tok = load_model(src)
    items = build_task(task_cfg).items("eval", task_cfg.n_eval)
    greedy = evaluate(model, tok, items, greedy=True, max_new_tokens=args.max_new_tokens, env=env)
    report: dict = {"model": str(src), "task": task_cfg.name, "items": len(items),
              "greedy_accuracy": greedy.accuracy}
    if args.samples > 0:
        sampled = evaluate(model, tok, items, greedy=False, samples=args.samples,
                           temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                           generator=torch.Generator().manual_seed(args.seed), env=env)
        report["sampled_accuracy"] = sampled.accuracy
        report["pass_at_k"] = {str(k): v for k, v in sampled.pass_at_k.items()}
    print(json.dumps(report, indent=2))
    return 0


def cmd_headroom(args: argparse.Namespace) -> int:
    from grpolab.train.headroom import headroom_command

    res = headroom_command(args.model, task=args.task, task_options=args.task_option, n=args.n, k=args.k,
                           temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                           seed=args.seed, out=args.out)
    print(res.message)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from grpolab.sweep.commands import sweep_command

    sweep_command(args.config, args.overrides, args.grid, seeds=args.seeds, jobs=args.jobs, out=args.out,
                  summary_only=args.summary_only)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from grpolab.sweep.commands import compare_command

    compare_command(args.config, args.overrides, args.vary, seeds=args.seeds, jobs=args.jobs, out=args.out,
                    baseline=args.baseline, summary_only=args.summary_only)
    return 0


def cmd_diagnose(args: argparse.Namespace) -> int:
    from grpolab.train.diagnose import diagnose_run

    report = diagnose_run(args.run_dir, base=args.base, n=args.n, probe=args.probe, seed=args.seed)
    print(f"report: {report}")
    return 0


def cmd_credit(args: argparse.Namespace) -> int:
    from grpolab.train.credit_viz import credit_page

    try:
        page = credit_page(args.run_dir, sample=args.sample, lam=args.lam, method=args.method, seed=args.seed,
                           out_dir=args.out, png=not args.no_png)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"error: {e}") from None
    print(f"wrote {page}" + ("" if args.no_png else f" and {page.with_suffix('.png')}"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="grpolab", description="RL with verifiable rewards (GRPO family) "
                                "for causal language models.")
    p.add_argument("--version", action="version", version=f"grpolab {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("train", help="RL-train a policy (default: the built-in tiny model on 'arith')")
    _add_config_args(t)
    t.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its last checkpoint")
    t.add_argument("--overwrite", action="store_true", help="start over in a run directory that has checkpoints")
    t.set_defaults(func=cmd_train)

    s = sub.add_parser("sft", help="supervised warm start of the tiny model on task demonstrations")
    _add_config_args(s)
    s.add_argument("--out", default="runs/sft", help="where to save the model (HF format)")
    s.set_defaults(func=cmd_sft)

    e = sub.add_parser("eval", help="greedy accuracy, sampled accuracy and pass@k of a model or run")
    e.add_argument("model", help="a model directory (HF format) or a grpolab run directory")
    e.add_argument("--task", default=None, help="task name (default: the run's task, else arith)")
    e.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    e.add_argument("--n", type=int, default=256, help="held-out items")
    e.add_argument("--samples", type=int, default=8, help="samples per item for sampled accuracy/pass@k (0: greedy only)")
    e.add_argument("--temperature", type=float, default=1.0)
    e.add_argument("--max-new-tokens", type=int, default=48)
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=cmd_eval)

    h = sub.add_parser("headroom", help="is there headroom for RL? greedy vs sampled success, pass@k, verdict")
    h.add_argument("model", help="a model directory (HF format) or a grpolab run directory")
    h.add_argument("--task", default=None, help="task name (default: the run's task, else arith)")
    h.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    h.add_argument("--n", type=int, default=256, help="held-out items")
    h.add_argument("--k", type=int, default=8, help="samples per item")
    h.add_argument("--temperature", type=float, default=None,
                   help="sampling temperature (default: the run's rollout.temperature, else 1.0)")
    h.add_argument("--max-new-tokens", type=int, default=None)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--out", default=None, help="write headroom.json/.md here (default: the run directory, "
                   "if MODEL is one)")
    h.set_defaults(func=cmd_headroom)

    w = sub.add_parser("sweep", help="a grid of training runs (resumable, several at once) and its summary")
    _add_config_args(w)
    w.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="one factor of the grid, e.g. --grid optim.lr=1e-4,3e-4 (repeatable)")
    w.add_argument("--seeds", type=int, default=1, help="seeds per grid point (trainer.seed = 0..N-1)")
    w.add_argument("--jobs", type=int, default=1, help="runs at once (torch threads per run = cores // jobs)")
    w.add_argument("--out", default="runs/sweep", help="sweep directory")
    w.add_argument("--summary-only", action="store_true", help="only rewrite the summary of finished runs")
    w.set_defaults(func=cmd_sweep)

    c = sub.add_parser("compare", help="variants x seeds: CIs, paired differences vs a baseline, explanations")
    _add_config_args(c)
    c.add_argument("--vary", action="append", default=[], metavar="KEY=A,B",
                   help="variants, e.g. --vary objective.aggregation=token,balanced (repeatable: product)")
    c.add_argument("--seeds", type=int, default=3)
    c.add_argument("--baseline", default=None, help="the variant others are compared with (a value, or "
                   "key=value,...; default: the first)")
    c.add_argument("--jobs", type=int, default=1)
    c.add_argument("--out", default="runs/compare")
    c.add_argument("--summary-only", action="store_true", help="only rewrite the comparison of finished runs")
    c.set_defaults(func=cmd_compare)

    d = sub.add_parser("diagnose", help="what changed in a trained run: drift, revert/transplant, effective rank")
    d.add_argument("run_dir", help="a grpolab run directory (with final/ or checkpoints/)")
    d.add_argument("--base", default=None, help="the starting model (default: RUN_DIR/sft, else model.path)")
    d.add_argument("--n", type=int, default=256, help="held-out items for the ablations")
    d.add_argument("--probe", type=int, default=64, help="held-out prompts for hidden-state ranks")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(func=cmd_diagnose)

    cr = sub.add_parser("credit", help="HTML/PNG page: each response token coloured by its teacher credit multiplier")
    cr.add_argument("run_dir", help="a grpolab run directory")
    cr.add_argument("--sample", type=int, default=6, help="responses to show")
    cr.add_argument("--method", default=None, choices=["rlsd", "gear", "opsd"],
                    help="credit method (default: the run's, or gear for a grpo run)")
    cr.add_argument("--lam", type=float, default=1.0, help="mixing weight shown (1 = the full teacher weight)")
    cr.add_argument("--seed", type=int, default=0)
    cr.add_argument("--out", default=None, help="output folder (default: RUN_DIR/credit)")
    cr.add_argument("--no-png", action="store_true", help="HTML only")
    cr.set_defaults(func=cmd_credit)
    return p


def _quiet_transformers() -> None:
    """No per-file progress bars or info chatter from transformers on the command line."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    from grpolab.config import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    _quiet_transformers()
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; resume with `grpolab train --resume RUN_DIR`", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
