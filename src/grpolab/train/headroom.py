"""Measure headroom (greedy vs sampled success) of a model on task items; write it to a run dir.

The statistics and the verdict are pure functions in :mod:`grpolab.diagnostics.headroom`; this
module runs the model. Sampling uses its own ``torch.Generator``, so calling it (e.g. at the start
of ``grpolab train``) leaves every other random stream untouched.
"""

from __future__ import annotations

from pathlib import Path

import torch

from grpolab.diagnostics.headroom import HeadroomResult, family_of, headroom_from_outcomes, headroom_markdown
from grpolab.train.evaluate import SOLVED, evaluate
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["measure_headroom", "write_headroom"]


def measure_headroom(model, tokenizer, items, *, k: int = 8, temperature: float = 1.0, top_p: float = 1.0,
                     max_new_tokens: int = 48, seed: int = 0, source: str = "",
                     batch_size: int = 256, env=None, collector=None, progress=None) -> HeadroomResult:
    """Greedy success, sampled success (k samples per item at ``temperature``) and pass@k, with CIs.

    ``progress``: ``desc -> callback`` (e.g. a :class:`grpolab.train.progress.LineProgress`'s
    ``update``) for each of the two passes, called with the items done after each batch.

    ``env``: an :class:`grpolab.config.EnvConfig` for multi-turn tasks (episodes instead of single
    completions), passed to :func:`grpolab.train.evaluate.evaluate`.
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


#: The automatic check at the start of ``grpolab train``: at most this many held-out items x k samples,
#: measured in chunks of :data:`TRAIN_CHECK_CHUNK` items within ``trainer.headroom_budget`` seconds.
TRAIN_CHECK_ITEMS = 64
TRAIN_CHECK_K = 8
TRAIN_CHECK_CHUNK = 8


def run_headroom_check(policy, tokenizer, eval_items, cfg, run_dir, *, log=print, collector=None,
                       clock=None) -> HeadroomResult:
    """The headroom check ``train`` runs before RL (``trainer.headroom``); writes headroom.{json,md}.

    Measures up to :data:`TRAIN_CHECK_ITEMS` held-out items x :data:`TRAIN_CHECK_K` samples at the
    rollout temperature, with a generator seeded from ``trainer.seed`` that nothing else shares, in
    chunks of :data:`TRAIN_CHECK_CHUNK` items, logging progress after each. With
    ``trainer.headroom_budget`` > 0 (seconds) it stops before a chunk that would end past the budget
    (judged by the slowest chunk so far; the first chunk always runs), so a slow model gets fewer
    items -- and wider intervals, which the verdict reports -- instead of a long wait. ``clock``:
    a ``time.perf_counter``-like function (tests).
    """
    import time

    clock = clock or time.perf_counter
    budget = float(getattr(cfg.trainer, "headroom_budget", 0.0) or 0.0)
    items = list(eval_items[:TRAIN_CHECK_ITEMS])
    k = TRAIN_CHECK_K
    seed = cfg.trainer.seed + 7919
    kw = {"env": getattr(cfg, "env", None)}
    if collector is not None:
        kw["collector"] = collector
    gen = torch.Generator().manual_seed(seed)
    was_training = policy.training
    t0 = clock()
    slowest = 0.0
    greedy_ok: list[bool] = []
    counts: list[int] = []
    done = 0
    while done < len(items):
        if budget > 0 and done > 0 and (clock() - t0) + slowest > budget:
            break
        chunk = items[done:done + TRAIN_CHECK_CHUNK]
        c0 = clock()
        greedy = evaluate(policy, tokenizer, chunk, greedy=True, max_new_tokens=cfg.rollout.max_new_tokens, **kw)
        sampled = evaluate(policy, tokenizer, chunk, greedy=False, samples=k, temperature=cfg.rollout.temperature,
                           top_p=cfg.rollout.top_p, max_new_tokens=cfg.rollout.max_new_tokens, generator=gen, **kw)
        slowest = max(slowest, clock() - c0)
        greedy_ok += [s >= SOLVED for s in greedy.scores]
        counts += sampled.solved_per_item()
        done += len(chunk)
        log(f"headroom: {done}/{len(items)} held-out items x {k} samples, {clock() - t0:.0f} s"
            + (f" of a {budget:.0f} s budget" if budget > 0 else ""))
    if was_training:
        policy.train()
    measured = items[:done]
    res = headroom_from_outcomes(greedy_ok, counts, k, [family_of(it.meta) for it in measured], seed=seed)
    res.temperature = cfg.rollout.temperature
    res.source = cfg.model.path or "policy at the start of RL"
    write_headroom(run_dir, res)
    cut = (f"; stopped at trainer.headroom_budget={budget:g} s, raise it for a tighter estimate"
           if done < len(items) else "")
    log(f"headroom ({done} held-out items x {k} samples, {clock() - t0:.0f} s{cut}): {res.message}")
    return res
