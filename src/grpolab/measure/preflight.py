"""The preflight's measuring part: sample the starting model through the run's collector, within a budget.

Statistics and verdicts are pure functions in the :mod:`grpolab.diagnostics.preflight` package; this module runs
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from grpolab.diagnostics.preflight import (
    CANT_TELL,
    PreflightResult,
    answer_in_text,
    failure_reason,
    family_of,
    preflight_from_outcomes,
    preflight_markdown,
)
from grpolab.utils.io import atomic_write_json, atomic_write_text

__all__ = ["BudgetPlanner", "PreflightSpec", "expected_responses", "measure_preflight", "run_preflight_check",
           "write_preflight"]

#: The pre-check at the start of ``grpolab train``: at most this many held-out items.
TRAIN_CHECK_ITEMS = 64
MAX_CHUNK = 16
MARGIN = 1.25  # a chunk is started only if its predicted cost x MARGIN fits in what is left
RESERVE_S = 0.5  # seconds kept for the statistics and the report
READABILITY_ITEMS = 4  # the teacher reads the first chunk of at least this many items (x k responses)


@dataclass
class PreflightSpec:
    """How the preflight samples: the run's rollout settings and the measurement's own.

    ``k`` sampled responses per item (>= 1; the all-equal share needs ``k >= group_size`` to be exact);
    ``group_size``, ``temperature``, ``top_p``, ``max_new_tokens``: the run's rollout settings; ``seed``
    seeds the measurement's own sampling generator; ``budget`` seconds (0 = no limit); ``readability``:
    measure the teacher's readability when the items carry privileged text (needs ``credit``, a
    :class:`grpolab.config.CreditConfig`); ``off_policy``: the run takes several optimizer steps per
    batch or samples with a lag; ``until_decided`` > 0: stop once at least this many items are measured
    and the GRPO verdict is decided (read after every chunk: a sequential look, stated in the report)."""

    k: int
    group_size: int
    temperature: float
    max_new_tokens: int
    top_p: float = 1.0
    seed: int = 0
    budget: float = 0.0
    readability: bool = True
    off_policy: bool = False
    until_decided: int = 0
    credit: Any = None
    task: str | None = None

    @classmethod
    def from_config(cls, cfg, *, k: int | None = None, seed: int | None = None, budget: float | None = None,
                    readability: bool = True, until_decided: int = 0) -> "PreflightSpec":
        """The spec of ``cfg`` (a :class:`grpolab.config.Config`): its rollout settings and credit config;
        ``k`` defaults to :func:`default_k`, ``seed`` to ``trainer.seed + 7919`` (a stream no training draw
        shares), ``budget`` to ``trainer.preflight_budget``."""
        r, t = cfg.rollout, cfg.trainer
        return cls(k=int(k or default_k(cfg)), group_size=int(r.group_size), temperature=float(r.temperature),
                   top_p=float(r.top_p), max_new_tokens=int(r.max_new_tokens),
                   seed=int(t.seed + 7919 if seed is None else seed),
                   budget=float(t.preflight_budget if budget is None else budget), readability=readability,
                   off_policy=is_off_policy(cfg), until_decided=int(until_decided), credit=cfg.credit,
                   task=cfg.task.name)

    def validate(self) -> "PreflightSpec":
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")
        if self.budget < 0:
            raise ValueError(f"the preflight budget must be >= 0 seconds (0 = no limit), got {self.budget:g}")
        return self


def expected_responses(spec: PreflightSpec, items: int) -> int:
    """Responses the measurement samples on ``items`` items: one greedy and ``k`` sampled each."""
    return int(items) * (1 + spec.k)


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


def _rescore_infos(items, texts, group_rows, rewards, workers: int, *, every_row: bool = False) -> list[dict]:
    """The verifier's ``info`` of each failed row (of every row with ``every_row``; others get ``{}``)."""
    from grpolab.rewards import score_batch

    row_items = [None] * len(texts)
    for i, rows in enumerate(group_rows):
        for r in rows.tolist():
            row_items[r] = items[i]
    rows = [r for r in range(len(texts)) if every_row or float(rewards[r]) < 1.0 - 1e-9]
    infos: list[dict] = [{} for _ in texts]
    if rows:
        res = score_batch([(row_items[r], texts[r]) for r in rows], workers=workers)
        for r, x in zip(rows, res):
            infos[r] = dict(x.info)
    return infos


def answer_of(text: str, info: dict) -> str | None:
    """A response's answer: the verifier's ``extracted`` answer when it names one, else the response's last
    non-empty line (at most 64 characters); None for an empty response."""
    if info.get("extracted") not in (None, ""):
        return str(info["extracted"]).strip()[:64]
    lines = [x.strip() for x in str(text or "").splitlines() if x.strip()]
    return lines[-1][:64] if lines else None


def _outcomes(collector, model, items, *, group_size: int, greedy: bool, temperature: float, top_p: float,
              generator) -> tuple[list[list[dict]], Any]:
    """Per item, per response: reward, length, finished, reason, answer_seen, answer; and the Experience.
    The greedy pass rescores every response (its answers feed the most-common-answer share)."""
    from grpolab.rollout.collector import EpisodeCollector

    exp = collector.collect(model, items, group_size=group_size, greedy=greedy, temperature=temperature,
                            top_p=top_p, generator=generator)
    r = exp.rollout
    rows = exp.group_rows()
    lengths = r.response_mask.sum(-1).tolist()
    finished = r.finished.tolist()
    rewards = exp.rewards.tolist()
    episodes = isinstance(collector, EpisodeCollector)  # episodes: no verifier
    infos = ([{} for _ in rewards] if episodes else
             _rescore_infos(items, exp.texts, rows, rewards, getattr(collector, "reward_workers", 1), every_row=greedy))
    out = []
    for i, idx in enumerate(rows):
        ref = getattr(items[i], "reference", None)
        per = []
        for row in idx.tolist():
            reason = failure_reason(rewards[row], infos[row], bool(finished[row]))
            per.append({"reward": rewards[row], "length": float(lengths[row]), "finished": bool(finished[row]),
                        "reason": reason, "answer_seen": reason is not None and answer_in_text(exp.texts[row], ref),
                        "answer": None if episodes or not greedy else answer_of(exp.texts[row], infos[row])})
        out.append(per)
    return out, exp


def measure_preflight(model, tokenizer, items, collector, spec: PreflightSpec, *, prompt_format=None,
                      log: Callable[[str], None] = print, clock: Callable[[], float] = time.perf_counter,
                      settings: dict | None = None, planner: BudgetPlanner | None = None) -> PreflightResult:
    """Measure ``items`` (in order, as many as ``spec.budget`` seconds allow; 0 = all) and return the verdicts.

    Args:
        model, tokenizer, items, collector: the run's (e.g. :class:`grpolab.runs.OpenedRun`'s).
        spec: how to sample (:class:`PreflightSpec`, e.g. ``PreflightSpec.from_config(cfg)``).
        prompt_format: the run's, for the teacher readability (with ``spec.credit``).
        log: the expected cost before the first item, then one progress line per chunk, with the items
            done, the time and an ETA; after the first item, the estimated seconds for all of them.
    """
    if not items:
        raise ValueError("the preflight needs at least one held-out item")
    spec.validate()
    planner = planner or BudgetPlanner(spec.budget)
    log(f"preflight: {len(items)} items x (1 greedy + {spec.k} sampled) = {expected_responses(spec, len(items))} "
        f"responses" + (f", within a {spec.budget:g} s budget" if spec.budget > 0 else ""))
    was_training = model.training
    model.eval()
    t0 = clock()
    try:
        greedy, sampled, read_row, decided_early = _measure_chunks(model, tokenizer, items, collector, spec,
                                                                   prompt_format, planner, log, clock, t0)
    finally:
        if was_training:
            model.train()
    done = len(greedy)
    if done == 0:
        raise ValueError(f"the preflight budget of {planner.budget:g} s leaves no time for one item")
    st = dict(settings or {})
    st.update({"k": spec.k, "group_size": spec.group_size, "temperature": spec.temperature,
               "max_new_tokens": spec.max_new_tokens, "seed": spec.seed, "items_measured": done,
               "items_available": len(items), "responses": expected_responses(spec, done),
               "budget_s": planner.budget or None, "stopped_at_budget": done < len(items) and not decided_early,
               "stopped_when_decided": decided_early, "seconds": round(clock() - t0, 2)})
    has_priv = any(getattr(it, "privileged", "") for it in items)
    if read_row is None and has_priv:  # say why, so the verdict's line names the real cause
        read_row = {"not_measured": "turned off (--no-readability)" if not spec.readability else
                    "no teacher to measure (no credit settings or prompt format)"
                    if spec.credit is None or prompt_format is None else
                    "the budget stopped before a first chunk of >= 4 items"}
    return _result(greedy, sampled, spec, families=[family_of(getattr(it, "meta", None)) for it in items[:done]],
                   readability=read_row, has_privileged=has_priv, settings=st)


def _measure_chunks(model, tokenizer, items, collector, spec: PreflightSpec, prompt_format, planner, log, clock, t0):
    """The chunk loop of :func:`measure_preflight`: ``(greedy, sampled, readability row, decided early)``."""
    gen = torch.Generator().manual_seed(int(spec.seed))
    greedy: list[dict] = []
    sampled: list[list[dict]] = []
    read_row = None
    has_priv = any(getattr(it, "privileged", "") for it in items)
    done = 0
    while done < len(items):
        size = planner.next_size(clock() - t0, len(items) - done)
        if size == 0:
            break
        chunk = list(items[done:done + size])
        c0 = clock()
        g, _ = _outcomes(collector, model, chunk, group_size=1, greedy=True, temperature=1.0, top_p=1.0,
                         generator=None)
        s, exp = _outcomes(collector, model, chunk, group_size=spec.k, greedy=False, temperature=spec.temperature,
                           top_p=spec.top_p, generator=gen)
        if (spec.readability and has_priv and read_row is None and prompt_format is not None
                and spec.credit is not None and (len(chunk) >= READABILITY_ITEMS or done + len(chunk) >= len(items))):
            read_row = _readability(model, tokenizer, prompt_format, spec.credit, exp, spec.temperature, spec.task)
        planner.record(len(chunk), clock() - c0)
        greedy += [x[0] for x in g]
        sampled += s
        done += len(chunk)
        if done == len(chunk) and done < len(items):  # the first timing: the whole measurement's estimate
            log(f"preflight: about {planner.per_item * len(items):.0f} s for all {len(items)} items at the first "
                f"item's {planner.per_item:.1f} s (model warm-up included)")
        log(_progress_line(done, len(items), spec.k, clock() - t0, planner.budget))
        if spec.until_decided and done >= spec.until_decided and done < len(items):
            v = _result(greedy, sampled, spec).verdict()
            if v != CANT_TELL:
                log(f"preflight: GRPO {v} after {done} items; stopping (until_decided={spec.until_decided})")
                return greedy, sampled, read_row, True
    return greedy, sampled, read_row, False


def _result(greedy: list[dict], sampled: list[list[dict]], spec: PreflightSpec, **kw) -> PreflightResult:
    """:func:`preflight_from_outcomes` of the per-response records of :func:`_outcomes`."""
    return preflight_from_outcomes(
        [x["reward"] for x in greedy], [[x["reward"] for x in r] for r in sampled],
        group_size=spec.group_size, max_new_tokens=spec.max_new_tokens,
        greedy_reasons=[x["reason"] for x in greedy], sampled_reasons=[[x["reason"] for x in r] for r in sampled],
        greedy_answer_seen=[x["answer_seen"] for x in greedy],
        sampled_answer_seen=[[x["answer_seen"] for x in r] for r in sampled],
        sampled_lengths=[[x["length"] for x in r] for r in sampled],
        greedy_answers=[x["answer"] for x in greedy], off_policy=spec.off_policy, seed=spec.seed, **kw)


def _readability(model, tokenizer, prompt_format, credit, exp, temperature: float, task: str | None = None) -> dict:
    """The teacher-readability row of one sampled chunk (the keys the verdict and the report use).

    One teacher forward serves both measures: the first-departure AUC (``teacher_auc``, which any copier of the
    reference passes by construction) and, where the task's worked answers can be re-derived
    (:data:`grpolab.diagnostics.rederive.REDERIVERS`), the error AUC that decides the RLSD/GEAR verdict: re-derived
    first-error tokens against the departed tokens of correct-but-reworded responses (``error_auc``, with its
    interval over responses; docs/credit.md, "Readability that can fail")."""
    from grpolab.diagnostics.rederive import REDERIVERS
    from grpolab.measure.readability import error_readability_row, readability_row, teacher_delta

    try:
        d = teacher_delta(model, tokenizer, prompt_format, credit, exp, temperature=temperature)
        row = readability_row(tokenizer, exp, d)
    except (ValueError, RuntimeError) as e:  # e.g. an environment's items: no teacher prompt
        return {"teacher_auc": None, "error": str(e)[:200]}
    out = {key: row.get(key) for key in ("teacher_auc", "response_auc", "wrong_responses_localised", "tokens_before",
                                         "responses", "correct_frac", "mean_kl", "placement", "needs", "met")}
    out["rederivable"] = task in REDERIVERS
    if out["rederivable"]:
        er = error_readability_row(tokenizer, exp, d, credit, task=task)
        ci = er.auc_error_vs_reworded
        out.update(error_auc=None if ci is None else ci.value,
                   error_auc_interval=None if ci is None or ci.low != ci.low else [ci.low, ci.high],
                   error_counts={"error": er.counts.get("error", 0), "reworded": er.counts.get("reworded", 0)},
                   gear_departed_share_correct=er.gear_departed_share_correct)
    return out


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
    """The pre-check ``grpolab train`` runs before RL (``trainer.preflight``): the preflight on up to
    :data:`TRAIN_CHECK_ITEMS` held-out items within ``trainer.preflight_budget`` seconds (0 = no limit),
    with a generator seeded from ``trainer.seed`` that nothing else shares; writes
    ``RUN_DIR/preflight.{json,md}`` and logs the GRPO verdict with its sample size."""
    t0 = clock()
    spec = PreflightSpec.from_config(cfg)
    res = measure_preflight(policy, tokenizer, list(eval_items[:TRAIN_CHECK_ITEMS]), collector, spec,
                            prompt_format=prompt_format if prompt_format is not None
                            else getattr(collector, "prompt_format", None), log=log, clock=clock,
                            settings={"model": cfg.model.path or "policy at the start of RL", "task": cfg.task.name})
    write_preflight(run_dir, res)
    cut = (f"; stopped at trainer.preflight_budget={spec.budget:g} s, raise it for a tighter estimate"
           if res.settings["stopped_at_budget"] else "")
    log(f"preflight ({res.stats.n_items} held-out items x {res.stats.k} samples, {clock() - t0:.0f} s{cut}): "
        f"{res.message}")
    others = [f"{m.method}: {m.verdict}" for m in res.methods if m.id != "grpo"]
    log("preflight methods: " + "; ".join(others) + f" ({Path(run_dir) / 'preflight.md'})")
    return res
