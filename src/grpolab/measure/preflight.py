"""The preflight's measuring part: sample the starting model through the run's collector, within a budget.

Statistics and verdicts are pure functions in :mod:`grpolab.diagnostics.preflight`; this module runs
the model. Per held-out item it collects one greedy response and ``k`` sampled ones (at the run's
temperature, ``k`` >= the run's group size) through the run's collector -- its prompt format, stop
tokens, verifier, or environment for multi-turn runs -- and records each response's reward, length,
whether it ended with a stop token, the verifier's ``info`` (for why it failed) and whether the
reference answer appears in it. With privileged text on the items it also measures the teacher's
readability on the first sampled chunk of at least 4 items (:func:`grpolab.measure.readability.measure_readability`).

Sampling uses its own ``torch.Generator``, so running it at the start of ``grpolab train`` leaves
every training random stream untouched.

The budget is a budget: items are measured in chunks, the first of one item (its cost, model
warm-up included, is the first estimate), each next one as large as fits -- at the last chunk's
per-item cost times a margin of 1.25 -- into what is left of the budget less the time to write the
report; a chunk that would end past the budget is not started.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import torch

from grpolab.diagnostics.headroom import family_of
from grpolab.diagnostics.preflight import (
    CANT_TELL,
    PreflightResult,
    answer_in_text,
    failure_reason,
    preflight_from_outcomes,
    preflight_markdown,
)
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["BudgetPlanner", "measure_preflight", "run_preflight_check", "write_preflight"]

#: The pre-check at the start of ``grpolab train``: at most this many held-out items.
TRAIN_CHECK_ITEMS = 64
MAX_CHUNK = 16
MARGIN = 1.25  # a chunk is started only if its predicted cost x MARGIN fits in what is left
RESERVE_S = 0.5  # seconds kept for the statistics and the report
READABILITY_ITEMS = 4  # the teacher reads the first chunk of at least this many items (x k responses)


class BudgetPlanner:
    """How many items the next chunk may hold within ``budget`` seconds (0 = no limit).

    ``next_size(elapsed, remaining_items)``: 1 for the first chunk (its cost, the model's warm-up
    included, is all there is to go on); then the largest size up to ``2 x`` the last one and
    ``max_chunk`` whose predicted cost (the last chunk's per-item cost x size x ``margin``) ends by
    ``budget - reserve``; 0 = stop. ``record(items, seconds)`` after each chunk.
    """

    def __init__(self, budget: float, *, max_chunk: int = MAX_CHUNK, margin: float = MARGIN,
                 reserve: float = RESERVE_S) -> None:
        self.budget, self.max_chunk, self.margin, self.reserve = float(budget), max_chunk, margin, reserve
        self.per_item = 0.0
        self.last = 0

    def record(self, items: int, seconds: float) -> None:
        self.per_item = seconds / max(items, 1)
        self.last = items

    def next_size(self, elapsed: float, remaining_items: int) -> int:
        if remaining_items <= 0:
            return 0
        if self.last == 0:
            return 1 if self.budget <= 0 or elapsed + self.reserve < self.budget else 0
        grow = min(self.max_chunk, 2 * self.last, remaining_items)
        if self.budget <= 0:
            return grow
        left = self.budget - self.reserve - elapsed
        fit = int(left / (self.per_item * self.margin)) if self.per_item > 0 else grow
        return max(0, min(grow, fit))


def _rescore_infos(items, texts, group_rows, rewards, workers: int) -> list[dict]:
    """The verifier's ``info`` of each failed row (solved rows get ``{}``)."""
    from grpolab.rewards import score_batch

    row_items = [None] * len(texts)
    for i, rows in enumerate(group_rows):
        for r in rows.tolist():
            row_items[r] = items[i]
    failed = [r for r in range(len(texts)) if float(rewards[r]) < 1.0 - 1e-9]
    infos: list[dict] = [{} for _ in texts]
    if failed:
        res = score_batch([(row_items[r], texts[r]) for r in failed], workers=workers)
        for r, x in zip(failed, res):
            infos[r] = dict(x.info)
    return infos


def _outcomes(collector, model, items, *, group_size: int, greedy: bool, temperature: float, top_p: float,
              generator) -> tuple[list[list[dict]], Any]:
    """Per item, per response: reward, length, finished, reason, answer_seen; and the Experience."""
    from grpolab.rollout.collector import EpisodeCollector

    exp = collector.collect(model, items, group_size=group_size, greedy=greedy, temperature=temperature,
                            top_p=top_p, generator=generator)
    r = exp.rollout
    rows = exp.group_rows()
    lengths = r.response_mask.sum(-1).tolist()
    finished = r.finished.tolist()
    rewards = exp.rewards.tolist()
    infos = (_rescore_infos(items, exp.texts, rows, rewards, getattr(collector, "reward_workers", 1))
             if not isinstance(collector, EpisodeCollector) else [{} for _ in rewards])  # episodes: no verifier
    out = []
    for i, idx in enumerate(rows):
        ref = getattr(items[i], "reference", None)
        per = []
        for row in idx.tolist():
            reason = failure_reason(rewards[row], infos[row], bool(finished[row]))
            per.append({"reward": rewards[row], "length": float(lengths[row]), "finished": bool(finished[row]),
                        "reason": reason, "answer_seen": reason is not None and answer_in_text(exp.texts[row], ref)})
        out.append(per)
    return out, exp


def measure_preflight(model, tokenizer, items, collector, *, k: int, group_size: int, temperature: float,
                      max_new_tokens: int, top_p: float = 1.0, seed: int = 0, budget: float = 0.0,
                      readability: bool = True, prompt_format=None, credit=None, off_policy: bool = False,
                      log: Callable[[str], None] = print, clock: Callable[[], float] = time.perf_counter,
                      settings: dict | None = None, planner: BudgetPlanner | None = None,
                      until_decided: int = 0) -> PreflightResult:
    """Measure ``items`` (in order, as many as ``budget`` seconds allow; 0 = all) and return the verdicts.

    Args:
        model, tokenizer, items, collector: the run's (e.g. :class:`grpolab.runs.OpenedRun`'s).
        k: sampled responses per item (>= 1; the all-equal share needs ``k >= group_size`` to be exact).
        group_size, temperature, top_p, max_new_tokens: the run's rollout settings.
        readability: measure the teacher's readability on the first sampled chunk when the items carry
            privileged text (needs ``prompt_format`` and ``credit``, a :class:`grpolab.config.CreditConfig`).
        off_policy: the run takes several optimizer steps per batch or samples with a lag.
        log: one progress line per chunk, with the items done, the time and an ETA.
        until_decided: > 0: stop once at least this many items are measured and the GRPO verdict is
            decided ("indicated" or "not indicated"); the verdict is then read after every chunk, so its
            error rate is somewhat above the nominal 5% (a sequential look), which the report states.
    """
    if not items:
        raise ValueError("the preflight needs at least one held-out item")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    planner = planner or BudgetPlanner(budget)
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(int(seed))
    t0 = clock()
    greedy: list[dict] = []
    sampled: list[list[dict]] = []
    read_row = None
    has_priv = any(getattr(it, "privileged", "") for it in items)
    done = 0
    decided_early = False
    try:
        while done < len(items):
            size = planner.next_size(clock() - t0, len(items) - done)
            if size == 0:
                break
            chunk = list(items[done:done + size])
            c0 = clock()
            g, _ = _outcomes(collector, model, chunk, group_size=1, greedy=True, temperature=1.0, top_p=1.0,
                             generator=None)
            s, exp = _outcomes(collector, model, chunk, group_size=k, greedy=False, temperature=temperature,
                               top_p=top_p, generator=gen)
            if (readability and has_priv and read_row is None and prompt_format is not None and credit is not None
                    and (len(chunk) >= READABILITY_ITEMS or done + len(chunk) >= len(items))):
                read_row = _readability(model, tokenizer, prompt_format, credit, exp, temperature)
            planner.record(len(chunk), clock() - c0)
            greedy += [x[0] for x in g]
            sampled += s
            done += len(chunk)
            log(_progress_line(done, len(items), k, clock() - t0, planner.budget))
            if until_decided and done >= until_decided and done < len(items):
                v = _result(greedy, sampled, group_size, max_new_tokens, seed=seed).verdict("GRPO")
                if v != CANT_TELL:
                    decided_early = True
                    log(f"preflight: GRPO {v} after {done} items; stopping (until_decided={until_decided})")
                    break
    finally:
        if was_training:
            model.train()
    if done == 0:
        raise ValueError(f"the preflight budget of {planner.budget:g} s leaves no time for one item")
    measured = items[:done]
    st = dict(settings or {})
    st.update({"k": k, "group_size": group_size, "temperature": temperature, "max_new_tokens": max_new_tokens,
               "seed": seed, "items_measured": done, "items_available": len(items),
               "budget_s": planner.budget or None, "stopped_at_budget": done < len(items) and not decided_early,
               "stopped_when_decided": decided_early,
               "seconds": round(clock() - t0, 2)})
    return _result(greedy, sampled, group_size, max_new_tokens, seed=seed,
                   families=[family_of(getattr(it, "meta", None)) for it in measured], readability=read_row,
                   has_privileged=has_priv, off_policy=off_policy, settings=st)


def _result(greedy: list[dict], sampled: list[list[dict]], group_size: int, max_new_tokens: int, **kw):
    """:func:`preflight_from_outcomes` of the per-response records of :func:`_outcomes`."""
    return preflight_from_outcomes(
        [x["reward"] for x in greedy], [[x["reward"] for x in r] for r in sampled],
        group_size=group_size, max_new_tokens=max_new_tokens,
        greedy_reasons=[x["reason"] for x in greedy], sampled_reasons=[[x["reason"] for x in r] for r in sampled],
        greedy_answer_seen=[x["answer_seen"] for x in greedy],
        sampled_answer_seen=[[x["answer_seen"] for x in r] for r in sampled],
        sampled_lengths=[[x["length"] for x in r] for r in sampled], **kw)


def _readability(model, tokenizer, prompt_format, credit, exp, temperature: float) -> dict:
    """The teacher-readability row of one sampled chunk (the keys the verdict and the report use)."""
    from grpolab.measure.readability import measure_readability

    try:
        row = measure_readability(model, tokenizer, prompt_format, credit, exp, temperature=temperature)
    except (ValueError, RuntimeError) as e:  # e.g. an environment's items: no teacher prompt
        return {"teacher_auc": None, "error": str(e)[:200]}
    return {key: row.get(key) for key in ("teacher_auc", "response_auc", "wrong_responses_localised", "tokens_before",
                                          "responses", "correct_frac", "mean_kl", "placement", "needs", "met")}


def _progress_line(done: int, total: int, k: int, elapsed: float, budget: float) -> str:
    from grpolab.utils.progress import format_seconds

    eta = elapsed / done * (total - done)
    if budget > 0:
        eta = min(eta, max(0.0, budget - elapsed))
    return (f"preflight: {done}/{total} items x (1 greedy + {k} sampled), {format_seconds(elapsed)}"
            + (f" of a {budget:g} s budget" if budget > 0 else "")
            + (f", ETA {format_seconds(eta)}" if done < total else ""))


def write_preflight(out_dir: str | Path, res: PreflightResult) -> tuple[Path, Path]:
    """Write ``preflight.json`` and ``preflight.md`` in ``out_dir`` (each atomically)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "preflight.json", out / "preflight.md"
    atomic_write_json(j, res.to_dict())
    atomic_write_text(m, preflight_markdown(res))
    return j, m


def is_off_policy(cfg) -> bool:
    """Several optimizer steps per rollout batch, or rollouts from an older policy."""
    t = cfg.trainer
    return t.epochs > 1 or t.mini_batches > 1 or t.policy_lag > 0


def default_k(cfg) -> int:
    """Samples per item: the run's group size, at least 8."""
    return max(8, int(cfg.rollout.group_size))


def run_preflight_check(policy, tokenizer, eval_items, cfg, run_dir, *, collector, prompt_format=None,
                        log: Callable[[str], None] = print, clock: Callable[[], float] = time.perf_counter
                        ) -> PreflightResult:
    """The pre-check ``grpolab train`` runs before RL (``trainer.headroom``): the preflight on up to
    :data:`TRAIN_CHECK_ITEMS` held-out items within ``trainer.headroom_budget`` seconds (0 = no limit),
    with a generator seeded from ``trainer.seed`` that nothing else shares; writes
    ``RUN_DIR/preflight.{json,md}`` and logs the GRPO verdict with its sample size."""
    t0 = clock()
    budget = float(getattr(cfg.trainer, "headroom_budget", 0.0) or 0.0)
    items = list(eval_items[:TRAIN_CHECK_ITEMS])
    res = measure_preflight(
        policy, tokenizer, items, collector, k=default_k(cfg), group_size=cfg.rollout.group_size,
        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, max_new_tokens=cfg.rollout.max_new_tokens,
        seed=cfg.trainer.seed + 7919, budget=budget, readability=True, prompt_format=prompt_format,
        credit=cfg.credit, off_policy=is_off_policy(cfg), log=log, clock=clock,
        settings={"model": cfg.model.path or "policy at the start of RL", "task": cfg.task.name})
    write_preflight(run_dir, res)
    n = res.stats["n_items"]
    cut = (f"; stopped at trainer.headroom_budget={budget:g} s, raise it for a tighter estimate"
           if res.settings["stopped_at_budget"] else "")
    log(f"preflight ({n} held-out items x {res.stats['k']} samples, {clock() - t0:.0f} s{cut}): {res.message}")
    others = [f"{m.method}: {m.verdict}" for m in res.methods[1:]]
    log("preflight methods: " + "; ".join(others) + f" ({Path(run_dir) / 'preflight.md'})")
    return res
