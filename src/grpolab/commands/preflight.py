"""``grpolab preflight MODEL_OR_RUN``: before a run, which method can help here?

Opens the model with :func:`grpolab.runs.open_run` (a run directory brings its config; a bare model
directory takes ``--config`` + ``--set``, so it is measured exactly as training will prompt, sample
and score it), states the expected cost, measures it with
:func:`grpolab.measure.preflight.measure_preflight` and writes ``preflight.json`` and ``preflight.md``
(:mod:`grpolab.diagnostics.preflight`) atomically after each stage: the start's measurement, then --
with ``--pilot`` -- the pilot's. ``--budget`` bounds the whole command: with a pilot the start gets
:data:`START_SHARE` of it, the pilot runs only where its estimate fits in what is left, and its
re-measurement stops at the budget (measuring a prefix of the same items).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path
from typing import Callable

from grpolab.commands.base import COUNT, POSITIVE_INT, SECONDS, Command, add_model_or_run

__all__ = ["PREFLIGHT", "preflight_command"]

#: With ``--pilot`` and ``--budget``: the share of the budget the start's measurement may take.
START_SHARE = 0.3


def _open(model, config, overrides, n, log):
    """:func:`grpolab.runs.open_run` with ``n`` held-out items, or all of them when the task holds fewer."""
    from grpolab.config import ConfigError
    from grpolab.runs import open_run

    try:
        return open_run(model, config, overrides, n_eval=n, log=log)
    except ConfigError as e:
        m = re.search(r"has only (\d+) eval items", str(e))
        if n is None or not m or int(m.group(1)) == 0:
            raise
        log(f"the task holds {m.group(1)} held-out items; measuring all of them")
        return open_run(model, config, overrides, n_eval=int(m.group(1)), log=log)


def preflight_command(model: str, *, config: str | None = None, overrides: list[str] = (), n: int | None = 128,
                      k: int | None = None, budget: float = 0.0, seed: int = 0, out: str | None = None,
                      readability: bool = True, until_decided: int = 0, pilot: int = 0,
                      log: Callable[[str], None] = print, clock: Callable[[], float] = time.perf_counter) -> int:
    """Measure ``model`` (a model directory, a run directory, or None: the config's model) on ``n``
    held-out items with ``k`` samples each (default: the run's group size, at least 8) and write
    ``preflight.{json,md}`` to ``out`` (default: the run directory, else ``runs/preflight``).
    ``until_decided`` > 0: stop once that many items are measured and the GRPO verdict is decided.
    ``pilot`` > 0: then train that many GRPO steps of the config into ``OUT/pilot`` and measure the
    same items again; the paired change decides GRPO's verdict (:func:`grpolab.pilot.run_pilot`).
    ``budget`` seconds (0 = no limit) bound the whole command."""
    from grpolab.config import ConfigError
    from grpolab.measure.preflight import PreflightSpec, expected_responses, measure_preflight, write_preflight
    from grpolab.pilot import run_pilot

    if budget < 0:
        raise ConfigError(f"--budget {budget:g}: must be >= 0 seconds (0 = no limit)")
    if pilot < 0:
        raise ConfigError(f"--pilot {pilot}: must be >= 0 GRPO steps (0 = no pilot)")
    if out is not None:  # before the model loads and the measurement runs, not after
        from grpolab.train.checks import check_writable

        check_writable(out, "--out", directory=True)
    t0 = clock()
    run = _open(model, config, overrides, n, log)
    cfg = run.config
    start_budget = budget * START_SHARE if (pilot and budget) else budget
    spec = PreflightSpec.from_config(cfg, k=k, seed=seed, budget=max(1e-3, start_budget - (clock() - t0)) if budget
                                     else 0.0, readability=readability, until_decided=until_decided)
    items = len(run.eval_items)
    cost = f"{expected_responses(spec, items)} sampled responses ({items} items x (1 greedy + {spec.k}))"
    if pilot:
        r = cfg.rollout
        cost += (f", then a pilot of {pilot} steps x {r.prompts_per_step} prompts x {r.group_size} = "
                 f"{pilot * r.prompts_per_step * r.group_size} training responses and the same items again")
    log(f"preflight: expected cost {cost}" + (f"; within --budget {budget:g} s" if budget else ""))
    res = measure_preflight(
        run.model, run.tokenizer, run.eval_items, run.collector, spec, prompt_format=run.prompt_format, log=log,
        clock=clock, settings={"model": str(run.model_dir) if run.model_dir else "the tiny model built from scratch",
                               "task": cfg.task.name, "task_options": cfg.task.options or None})
    target = Path(out) if out is not None else (run.run_dir if run.run_dir is not None else Path("runs/preflight"))
    res.settings["measurement_budget_s"], res.settings["budget_s"] = res.settings["budget_s"], budget or None
    res.settings["stage"] = "start measured" + ("; pilot pending" if pilot else "")
    j, m = write_preflight(target, res)
    log(f"wrote {j} and {m} (the start's measurement)")
    if pilot:
        if run.run_dir is not None:  # a run directory: train from the model it holds, with its config
            model, config = str(run.model_dir), config or str(run.run_dir / "config.yaml")
            log(f"pilot: from the run's model {model} with {config}")
        left = (budget - (clock() - t0)) if budget else None
        res = run_pilot(res, run, model, config, overrides, steps=pilot, out_dir=target / "pilot", spec=spec,
                        left=left, log=log, clock=clock)
        res.settings["stage"] = "pilot measured" if res.pilot else "start measured; pilot skipped"
        j, m = write_preflight(target, res)
    res.settings["total_seconds"] = round(clock() - t0, 2)
    j, m = write_preflight(target, res)
    _print_table(res, log)
    log(f"wrote {j} and {m}")
    return 0


def _print_table(res, log) -> None:
    width = max(len(x.method) for x in res.methods)
    for x in res.methods:
        log(f"  {x.method:<{width}}  {x.verdict:<13}  {x.rests_on}")
        for line in x.set_lines:
            log(f"  {'':<{width}}  {'':<13}  --set {line}" if "=" in line else f"  {'':<{width}}  {'':<13}  {line}")
    log(res.message)


def _arguments(pf: argparse.ArgumentParser) -> None:
    add_model_or_run(pf, optional=True, config_help="the training config to measure for (task, prompt format, "
                     "rollout settings, env)")
    pf.add_argument("--n", type=POSITIVE_INT, default=128, help="held-out items at most (all of them when the "
                    "task holds fewer)")
    pf.add_argument("--k", type=POSITIVE_INT, default=None, help="samples per item (default: the run's "
                    "rollout.group_size, at least 8)")
    pf.add_argument("--budget", type=SECONDS, default=0.0, help="seconds the whole preflight may "
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


def _run(args: argparse.Namespace) -> int:
    return preflight_command(args.model, config=args.config, overrides=args.overrides, n=args.n, k=args.k,
                             budget=args.budget, seed=args.seed, out=args.out, readability=not args.no_readability,
                             until_decided=args.until_decided, pilot=args.pilot)


PREFLIGHT = Command("preflight", "before a run: which method can help here? headroom with failure reasons, signal at "
                    "the group size, length coupling, teacher readability; one verdict per method with the --set "
                    "lines to use", _arguments, _run)
