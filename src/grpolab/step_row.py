"""Every key of a training step's metrics row, named once.

Each key has its meaning and its verl-style alias here, and rows always carry the same keys.

:data:`STEP_METRICS` is the one table of the step row (``metrics.jsonl``, TensorBoard, W&B): each
entry is declared here with :func:`_m`, which returns the key, and the code that computes a number
writes it under that constant (``row[REWARD_MEAN] = ...``), never under a string of its own.
Statistics that another module names for its own use (``policy_loss``'s ``clip_frac_low``, the
credit reweighting's ``delta_mean``, an episode batch's ``turns``) enter the row through
:func:`row_key`, which refuses a name the table does not declare. docs/metrics.md is this table
rendered by :func:`markdown_tables` (``tests/test_step_row.py`` checks that they agree,
and that every key a real run writes is declared).

Two families stand for several keys: ``<bucket>`` is each label of
:func:`grpolab.objectives.position_bucket_labels` (``1-16``, ..., ``1025+``) and ``<late>`` is
:data:`grpolab.objectives.LATE_POSITION`; :func:`expand` lists their members.

grpolab's own names (``update/clip_frac``, ``reward/mean``, ...) stay; with ``log.metric_names=both``
each step row also carries the verl names of the common metrics (:attr:`Metric.verl`,
:data:`VERL_SUMS`), so a dashboard built for verl (or a comparison script) reads a grpolab run
unchanged. Where grpolab's quantity is not exactly verl's, the alias still carries grpolab's value
and the meaning says how they differ (``actor/ppo_kl`` is grpolab's k3 estimate of
KL(old || new), verl logs the k1 mean of ``old - new``).

:func:`fill_row` gives every row the same keys: any key of the run's schema that a step did not
compute (a step where every row was skipped has no clip fraction; a batch with no correct answer
has no ``length/correct``) is written as NaN instead of being left out.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterable

__all__ = ["GROUPS", "Metric", "STEP_METRICS", "VERL_NAMES", "VERL_SUMS", "checked", "declared", "expand", "fill_row",
           "group_keys", "markdown_tables", "row_key", "stat_name", "undeclared", "with_verl_names"]


@dataclass(frozen=True)
class Metric:
    """One key of the step row.

    Attributes:
        key: the row key; ``<bucket>`` / ``<late>`` mark a family (see the module docstring).
        meaning: what the number is, in one or two sentences (docs/metrics.md shows it).
        group: where it comes from, a key of :data:`GROUPS`.
        verl: its verl-style alias under ``log.metric_names=both`` ("" for none).
    """

    key: str
    meaning: str
    group: str
    verl: str = ""


#: group -> (heading, the module that computes the group's numbers, when a row has them)
GROUPS: dict[str, tuple[str, str, str]] = {
    "batch": ("The step's batch", "grpolab.train.step_metrics", "every step"),
    "update": ("The update", "grpolab.train.policy_update (statistics of grpolab.objectives.policy_loss)",
               "every step; null when every row was skipped"),
    "sampling": ("Sampling and shaping", "grpolab.train.step_batch",
                 "with rollout.dynamic_sampling / objective.overlong_buffer"),
    "run": ("Time, throughput, memory", "grpolab.train.loop, grpolab.train.watch", "every step"),
    "eval": ("Held-out evaluation", "grpolab.train.loop",
             "every trainer.eval_every steps and the last; null on other steps"),
    "credit": ("Credit step", "grpolab.objectives.credit_row, grpolab.train.credit", "with credit.name set"),
    "episode": ("Multi-turn episodes", "grpolab.rollout.episodes", "with env.name set"),
}

#: key -> its entry, in declaration order (the order of docs/metrics.md)
STEP_METRICS: dict[str, Metric] = {}


def _m(key: str, meaning: str, group: str, verl: str = "") -> str:
    """Declare one step-row key; returns it (the constant producers write under)."""
    if key in STEP_METRICS or group not in GROUPS:
        raise ValueError(f"step metric {key!r}: declared twice or unknown group {group!r}")
    STEP_METRICS[key] = Metric(key, meaning, group, verl)
    return key


# --- the step's batch (grpolab.train.step_metrics) ----------------------------------------------
REWARD_MEAN = _m("reward/mean", "mean verifier reward of the step's responses (shaping not included)", "batch",
                 "critic/score/mean")
REWARD_STD = _m("reward/std", "standard deviation of those rewards (0 for one response)", "batch")
REWARD_MAX = _m("reward/max", "highest reward of the step", "batch", "critic/score/max")
REWARD_MIN = _m("reward/min", "lowest reward of the step", "batch", "critic/score/min")
ACCURACY = _m("accuracy", "share of the step's responses that solve their item (reward >= 1)", "batch")
LENGTH_MEAN = _m("length/mean", "mean response length, in tokens (model tokens only in episodes)", "batch",
                 "response_length/mean")
LENGTH_STD = _m("length/std", "standard deviation of the response lengths (0 for one response)", "batch")
LENGTH_MAX = _m("length/max", "longest response, in tokens", "batch", "response_length/max")
LENGTH_MIN = _m("length/min", "shortest response, in tokens", "batch", "response_length/min")
LENGTH_TRUNCATED_FRAC = _m("length/truncated_frac", "share of responses cut at the length cap (no stop token)",
                           "batch", "response_length/clip_ratio")
PROMPT_LENGTH_MEAN = _m("prompt_length/mean", "mean prompt length, in tokens", "batch", "prompt_length/mean")
REWARD_ERRORS = _m("reward/errors", "responses whose reward failed (raised, NaN, not a number); each scored 0",
                   "batch")
ADVANTAGES_MEAN = _m("advantages/mean", "mean advantage over responses (per-token advantages: each response's "
                     "token mean, after the credit step)", "batch", "critic/advantages/mean")
ADVANTAGES_MAX = _m("advantages/max", "highest response advantage (as advantages/mean)", "batch",
                    "critic/advantages/max")
ADVANTAGES_MIN = _m("advantages/min", "lowest response advantage (as advantages/mean)", "batch",
                    "critic/advantages/min")
LENGTH_CORRECT = _m("length/correct", "mean length of the solved responses; null when none", "batch")
LENGTH_INCORRECT = _m("length/incorrect", "mean length of the unsolved responses; null when none", "batch")
LENGTH_GAP = _m("length/gap_incorrect_minus_correct", "length/incorrect - length/correct", "batch")
LENGTH_MIXED_CORRECT = _m("length/mixed_correct", "over groups with a solved and an unsolved response: mean of "
                          "each group's solved-response mean length; null when no group is mixed", "batch")
LENGTH_MIXED_INCORRECT = _m("length/mixed_incorrect", "the same for the unsolved responses", "batch")
LENGTH_MIXED_RATIO = _m("length/mixed_ratio", "length/mixed_incorrect / length/mixed_correct (> 1: failures run "
                        "longer than successes of the same prompt)", "batch")
GROUPS_MIXED_FRAC = _m("groups/mixed_frac", "share of prompt groups with both a solved and an unsolved response",
                       "batch")
GROUPS_ALL_EQUAL_FRAC = _m("groups/all_equal_frac", "share of prompt groups whose rewards are all equal",
                           "batch")
GROUPS_WITH_SIGNAL = _m("groups/with_signal", "prompt groups whose advantage is not 0 everywhere (rewards as the "
                        "advantage sees them, shaping included); 0: the step learned nothing", "batch")
REWARD_SCORED = _m("reward/scored", "responses the verifier scored this step (every dynamic-sampling round)",
                   "batch")

# --- the update (grpolab.train.policy_update; the first block in the order of metric_schema) -----
UPDATE = "update/"  # the update's statistics enter the row as UPDATE + their name (row_key)
UPDATE_LOSS = _m("update/loss", "the loss optimized: each mini-batch's loss, mean over optimizer steps", "update")
UPDATE_PG_LOSS = _m("update/pg_loss", "its policy-gradient term, aggregated as the loss", "update", "actor/pg_loss")
UPDATE_KL = _m("update/kl", "the aggregated KL estimate to the reference (the loss adds objective.kl_coef times "
               "it; 0 without a reference)", "update", "actor/kl_loss")
UPDATE_CLIP_FRAC_LOW = _m("update/clip_frac_low", "share of policy tokens where the lower clip binds (A < 0, "
                          "ratio < 1 - clip_low)", "update")
UPDATE_CLIP_FRAC_HIGH = _m("update/clip_frac_high", "share of policy tokens where the upper clip binds (A > 0, "
                           "ratio > 1 + clip_high)", "update")
UPDATE_CLIP_FRAC_DUAL = _m("update/clip_frac_dual", "share of policy tokens where the dual clip binds (A < 0)",
                           "update", "actor/pg_clipfrac_lower")
UPDATE_CLIP_FRAC = _m("update/clip_frac", "share of policy tokens where any clip binds", "update")
UPDATE_RATIO_MEAN = _m("update/ratio_mean", "mean importance ratio over policy tokens", "update")
UPDATE_RATIO_MIN = _m("update/ratio_min", "smallest importance ratio of a micro-batch, token-weighted mean",
                      "update")
UPDATE_RATIO_MAX = _m("update/ratio_max", "largest importance ratio of a micro-batch, token-weighted mean",
                      "update")
UPDATE_APPROX_KL = _m("update/approx_kl", "k3 estimate of KL(old || new) over policy tokens (verl's ppo_kl is the "
                      "k1 mean of old - new)", "update", "actor/ppo_kl")
UPDATE_ENTROPY = _m("update/entropy", "mean entropy of the policy's next-token distribution over the response "
                    "tokens of the rows that went through the forward", "update", "actor/entropy")
UPDATE_SKIPPED_ROWS_FRAC = _m("update/skipped_rows_frac", "share of rows whose forward was skipped (advantage 0 "
                              "everywhere, no KL term: they add nothing to the gradient)", "update")
UPDATE_GRAD_NORM = _m("update/grad_norm", "gradient norm before clipping, mean over optimizer steps", "update",
                      "actor/grad_norm")
UPDATE_CLIP_BY_POS = _m("update/clip_frac_by_pos/<bucket>", "share of the policy tokens at those response "
                        "positions where a clip binds", "update")
UPDATE_DRIFT_BY_POS = _m("update/cum_log_ratio_rms_by_pos/<bucket>", "root mean square of the cumulative log ratio "
                         "(logp - old) at those positions: how far the behaviour policy has drifted (0 on-policy)",
                         "update")
UPDATE_DRIFT_LATE = _m("update/cum_log_ratio_rms_pos_gt<late>", "the same over every position after <late>", "update")

# --- sampling and shaping (grpolab.train.step_batch) --------------------------------------------
DS_ROUNDS = _m("dynamic_sampling/rounds", "sampling rounds this step (rollout.dynamic_sampling)", "sampling")
DS_SAMPLED_GROUPS = _m("dynamic_sampling/sampled_groups", "prompt groups sampled over the rounds", "sampling")
DS_KEPT_GROUPS = _m("dynamic_sampling/kept_groups", "groups with signal kept for the update", "sampling")
DS_SIGNAL_FRAC = _m("dynamic_sampling/signal_frac", "share of the sampled groups that had signal", "sampling")
REWARD_OVERLONG_PENALTY = _m("reward/overlong_penalty", "mean overlong shaping added to the rewards the advantage "
                             "sees (objective.overlong_buffer; <= 0)", "sampling")

# --- time, throughput, memory (grpolab.train.loop, grpolab.train.watch) -------------------------
LR = _m("lr", "learning rate the step's first optimizer step ran at (as TRL and verl log it)", "run", "actor/lr")
TIME_STEP = _m("time/step", "wall time of the step, seconds (sampling to the update's end)", "run",
               "timing_s/step")
TIME_ROLLOUT = _m("time/rollout", "seconds spent sampling", "run", "timing_s/gen")
TIME_REWARD = _m("time/reward", "seconds spent scoring", "run", "timing_s/reward")
TIME_UPDATE = _m("time/update", "seconds of advantages, reference log-probs, credit step and update", "run",
                 "timing_s/update_actor")
TOKENS_PER_S = _m("tokens_per_s", "prompt + response tokens of the step per second of time/step", "run",
                  "perf/throughput")
TIME_REWARD_FRAC = _m("time/reward_frac", "time/reward / time/step: the verifier's share of the step's wall time",
                      "run")
TIME_REWARD_PER_S = _m("time/reward_per_s", "responses scored per second of time/reward (the code verifier: programs run in "
                  "the sandbox per second); null when no time was spent scoring", "run")
MEMORY_PEAK_RSS_MB = _m("memory/peak_rss_mb", "this process's peak resident memory so far, MiB", "run")
MEMORY_CUDA_PEAK_MB = _m("memory/cuda_peak_mb", "peak memory the torch allocator held on the GPU, MiB (with a "
                         "CUDA device in use)", "run")

# --- held-out evaluation (grpolab.train.loop) ---------------------------------------------------
EVAL_ACCURACY = _m("eval/accuracy", "held-out greedy accuracy", "eval")
EVAL_MEAN_REWARD = _m("eval/mean_reward", "held-out greedy mean reward", "eval")
EVAL_MEAN_LENGTH = _m("eval/mean_length", "held-out greedy mean response length, tokens", "eval")

# --- the credit step (grpolab.objectives.credit_row, grpolab.train.credit) ----------------------
CREDIT = "credit/"  # the reweighting's own statistics enter the row as CREDIT + their name (row_key)
CREDIT_LAM = _m("credit/lam", "the teacher's mixing weight this step", "credit")
CREDIT_SCORED_ROWS_FRAC = _m("credit/scored_rows_frac", "rows sent through the teacher (rlsd/gear: A != 0; opsd: "
                             "all)", "credit")
CREDIT_KL_SAMPLED = _m("credit/kl_sampled", "k1 estimate of KL(student || teacher) from the sampled tokens of "
                       "the scored rows", "credit")
CREDIT_KL = _m("credit/kl", "the exact full-vocabulary KL(student || teacher) when computed (GEAR with "
               "divergence kl)", "credit")
CREDIT_DELTA_MEAN = _m("credit/delta_mean", "mean of teacher - student log-prob of the sampled tokens (scored "
                       "rows)", "credit")
CREDIT_DELTA_STD = _m("credit/delta_std", "its standard deviation", "credit")
CREDIT_SEGMENTS_PER_SEQ = _m("credit/segments_per_seq", "GEAR segments per scored response", "credit")
CREDIT_SEGMENT_LEN = _m("credit/segment_len", "mean GEAR segment length, tokens", "credit")
CREDIT_SEGMENT_TOKEN_FRAC = _m("credit/segment_token_frac", "share of scored tokens inside a GEAR segment", "credit")
CREDIT_CLIP_FRAC = _m("credit/clip_frac", "share of reweighted tokens whose weight hit 1 +- eps_w", "credit")
CREDIT_MULTIPLIER_MIN = _m("credit/multiplier_min", "smallest A_t / A over scored tokens", "credit")
CREDIT_MULTIPLIER_MAX = _m("credit/multiplier_max", "largest A_t / A over scored tokens", "credit")
CREDIT_LEAK_MENTION_FRAC = _m("credit/leak_mention_frac", "responses that say 'reference' or quote a line of "
                              "the teacher template (the leak signal)", "credit")
CREDIT_LEAK_COPY_FRAC = _m("credit/leak_copy_frac", "responses that contain the privileged context verbatim "
                           "(read next to accuracy: for built-in tasks it is the worked solution)", "credit")
TIME_TEACHER = _m("time/teacher", "seconds of the credit step (teacher forward and reweighting)", "credit",
                  "timing_s/teacher")

# --- multi-turn episodes (grpolab.rollout.episodes: Episodes.metrics) ---------------------------
EPISODE = "episode/"  # the prefix Episodes.metrics writes; step_row.checked refuses a name not declared here
EPISODE_TURNS = _m("episode/turns", "model turns per episode", "episode")
EPISODE_TOOL_ERRORS = _m("episode/tool_errors", "tool errors per episode", "episode")
EPISODE_TOOL_ERRORS_PER_TURN = _m("episode/tool_errors_per_turn", "tool errors per model turn", "episode")
EPISODE_INVALID_ACTIONS = _m("episode/invalid_actions", "invalid actions per episode", "episode")
EPISODE_INVALID_PER_TURN = _m("episode/invalid_per_turn", "invalid actions per model turn", "episode")
EPISODE_TRUNCATED_FRAC = _m("episode/truncated_frac", "share of episodes ended by the turn or token budget", "episode")
EPISODE_OBSERVATION_TOKENS = _m("episode/observation_tokens", "observation tokens per episode", "episode")
EPISODE_TOKENS = _m("episode/tokens", "model and observation tokens per episode", "episode")

#: grpolab key -> verl key (from the table). Sums of grpolab keys are in :data:`VERL_SUMS`.
VERL_NAMES: dict[str, str] = {m.key: m.verl for m in STEP_METRICS.values() if m.verl}
#: verl key -> the grpolab keys whose sum it is (verl's pg_clipfrac counts both clip sides).
VERL_SUMS: dict[str, tuple[str, ...]] = {
    "actor/pg_clipfrac": ("update/clip_frac_low", "update/clip_frac_high"),
}


@functools.lru_cache(maxsize=None)
def _families() -> dict[str, tuple[str, ...]]:
    from grpolab.objectives.loss import LATE_POSITION, position_bucket_labels

    return {"<bucket>": tuple(position_bucket_labels()), "<late>": (str(LATE_POSITION),)}


def expand(key: str) -> list[str]:
    """The keys a declared ``key`` stands for: itself, or each member of its family."""
    for mark, values in _families().items():
        if mark in key:
            return [key.replace(mark, v) for v in values]
    return [key]


@functools.lru_cache(maxsize=None)
def _all_keys() -> frozenset[str]:
    keys = {k for m in STEP_METRICS for k in expand(m)}
    return frozenset(keys | set(VERL_NAMES.values()) | set(VERL_SUMS))


def group_keys(group: str) -> list[str]:
    """Every key of ``group`` (families expanded), in declaration order."""
    return [k for m in STEP_METRICS.values() if m.group == group for k in expand(m.key)]


def declared(key: str) -> bool:
    """Whether ``key`` is a step-row key of :data:`STEP_METRICS` (a family member or a verl alias included)."""
    return key in _all_keys()


def undeclared(keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` that :data:`STEP_METRICS` does not declare (``step`` is the row's index)."""
    known = _all_keys() | {"step"}
    return [k for k in keys if k not in known]


def checked(row: dict[str, float]) -> dict[str, float]:
    """``row`` itself; raises KeyError naming every key :data:`STEP_METRICS` does not declare (the
    trainer passes each step row through here before logging it)."""
    bad = undeclared(row)
    if bad:
        raise KeyError(f"step metrics {', '.join(map(repr, bad))} are not declared; add each to "
                       "grpolab.step_row.STEP_METRICS with its meaning")
    return row


def row_key(prefix: str, name: str) -> str:
    """``prefix + name``, the row key of a statistic another module names (``row_key(UPDATE,
    "clip_frac_low")``); raises KeyError when the table does not declare it."""
    key = prefix + name
    if not declared(key):
        raise KeyError(f"step metric {key!r} is not declared; add it to grpolab.step_row.STEP_METRICS "
                       "with its meaning")
    return key


def stat_name(prefix: str, key: str, member: str | None = None) -> str:
    """The name a module gives the statistic it hands on as row key ``key`` (``key`` without
    ``prefix``), with its family mark replaced by ``member`` (``stat_name(UPDATE, UPDATE_GRAD_NORM)``
    -> ``"grad_norm"``; ``stat_name(UPDATE, UPDATE_CLIP_BY_POS, "1-16")`` -> ``"clip_frac_by_pos/1-16"``)."""
    if not key.startswith(prefix):
        raise ValueError(f"{key!r} does not start with {prefix!r}")
    name = key[len(prefix):]
    if member is not None:
        name = next((name.replace(mark, member) for mark in _families() if mark in name), name)
    return name


def markdown_tables() -> str:
    """docs/metrics.md's tables: one per group, each key with its meaning and verl-style alias."""
    out = []
    for group, (heading, source, when) in GROUPS.items():
        out += [f"### {heading}", "", f"From `{source}`; {when}.", "", "| key | meaning | verl-style alias |",
                "|---|---|---|"]
        for m in STEP_METRICS.values():
            if m.group == group:
                alias = f"`{m.verl}`" if m.verl else ""
                out.append(f"| `{m.key}` | {m.meaning} | {alias} |")
        out.append("")
    sums = "; ".join(f"`{k}` = {' + '.join(f'`{p}`' for p in parts)}" for k, parts in VERL_SUMS.items())
    out += [f"Aliases of sums: {sums}.", ""]
    return "\n".join(out)


def with_verl_names(row: dict[str, float]) -> dict[str, float]:
    """``row`` plus the verl alias of every mapped key it holds (NaN propagates through sums)."""
    out = dict(row)
    for ours, theirs in VERL_NAMES.items():
        if ours in row:
            out[theirs] = row[ours]
    for theirs, parts in VERL_SUMS.items():
        if any(p in row for p in parts):
            out[theirs] = sum(float(row.get(p, math.nan)) for p in parts)
    return out


def fill_row(row: dict[str, float], schema: Iterable[str]) -> dict[str, float]:
    """``row`` with NaN for every key of ``schema`` it lacks (keys of ``row`` outside it stay)."""
    out = {k: math.nan for k in schema}
    out.update(row)
    return out
