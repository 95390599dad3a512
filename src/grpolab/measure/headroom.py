"""Measure headroom (greedy vs sampled success) of a model on task items; write it to a run dir.

``grpolab headroom`` still uses :func:`measure_headroom`; the check ``grpolab train`` runs before RL
is the preflight now (:mod:`grpolab.measure.preflight`, ``run_headroom_check`` delegates to it).

The statistics and the verdict are pure functions in :mod:`grpolab.diagnostics.headroom`; this
module runs the model. Sampling uses its own ``torch.Generator``, so calling it (e.g. at the start
of ``grpolab train``) leaves every other random stream untouched.
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpolab.diagnostics.headroom import HeadroomResult, family_of, headroom_from_outcomes, headroom_markdown
from grpolab.measure.evaluate import SOLVED, evaluate
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["measure_headroom", "write_headroom"]


def measure_headroom(model, tokenizer, items, *, k: int = 8, temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 48, seed: int = 0, source: str = "",
                     batch_size: int = 256, env=None, collector=None, progress=None) -> HeadroomResult:
    """Greedy success, sampled success (k samples per item at ``temperature``) and pass@k, with CIs.

    ``progress``: ``desc -> callback`` (e.g. a :class:`grpolab.utils.progress.LineProgress`'s
    ``update``) for each of the two passes, called with the items done after each batch.

    ``env``: an :class:`grpolab.config.EnvConfig` for multi-turn tasks (episodes instead of single
    completions), passed to :func:`grpolab.measure.evaluate.evaluate`.
    """
    if not items:
        raise ValueError("measure_headroom needs at least one item")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    was_training = model.training
    kw = {"env": env} if env is not None else {}
    if collector is not None:  # the run's collector: its prompt format and stop tokens
        kw["collector"] = collector
    greedy = evaluate(model, tokenizer, items, greedy=True, max_new_tokens=max_new_tokens,
                      batch_size=batch_size, progress=progress("headroom greedy") if progress else None, **kw)
    gen = torch.Generator().manual_seed(int(seed))
    sampled = evaluate(model, tokenizer, items, greedy=False, samples=k, temperature=temperature,
                       top_p=top_p, max_new_tokens=max_new_tokens, generator=gen, batch_size=batch_size,
                       progress=progress(f"headroom sampled x{k}") if progress else None, **kw)
    if was_training:
        model.train()
    g = [s >= SOLVED for s in greedy.scores]
    c = sampled.solved_per_item()
    res = headroom_from_outcomes(g, c, k, [family_of(it.meta) for it in items], seed=seed)
    res.temperature = temperature
    res.source = source
    return res


def write_headroom(out_dir: str | Path, res: HeadroomResult, name: str = "headroom") -> tuple[Path, Path]:
    """Write ``NAME.json`` and ``NAME.md`` in ``out_dir`` (atomically)."""
    out = Path(out_dir)
    j, m = out / f"{name}.json", out / f"{name}.md"
    atomic_write_json(j, res.to_dict())
    atomic_write_text(m, headroom_markdown(res))
    return j, m


def run_headroom_check(policy, tokenizer, eval_items, cfg, run_dir, *, log=print, collector=None, clock=None):
    """The check ``train`` runs before RL (``trainer.headroom``): since issue 43 the budgeted preflight
    (:func:`grpolab.measure.preflight.run_preflight_check`), which writes ``RUN_DIR/preflight.{json,md}``
    and returns a :class:`grpolab.diagnostics.preflight.PreflightResult`. The old check said "no
    headroom" from 8 items on a task where GRPO then gained 58 points (docs/when-grpo-helps.md)."""
    import time

    from grpolab.rollout.collector import collector_for
    from grpolab.measure.preflight import run_preflight_check

    if collector is None:
        collector = collector_for(cfg, tokenizer)
    return run_preflight_check(policy, tokenizer, eval_items, cfg, run_dir, collector=collector,
                               prompt_format=getattr(collector, "prompt_format", None), log=log,
                               clock=clock or time.perf_counter)
