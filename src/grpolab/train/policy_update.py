"""The policy update of one training step: :func:`update`.

``trainer.epochs x trainer.mini_batches`` optimizer steps over one :class:`Experience`;
mini-batches are split along prompt groups (balanced aggregation needs whole groups, CTPO whole
sequences), the aggregation weights of each mini-batch are computed once over the whole
mini-batch and sliced per micro-batch, so gradient accumulation is exact (the micro-batch size
changes neither the loss nor the gradient; ``tests/train/test_update.py`` checks it at trainer
level). The objective itself is :func:`grpolab.objectives.policy_loss` (docs/methods.md).

The order of the prompt groups (which groups share a mini-batch) is drawn from the ``generator``
the trainer passes, its dedicated training RNG, never from torch's global stream: greedy
evaluation draws from the global stream in proportion to how many items it evaluates, so with
the global stream a run's updates, and everything after, depended on ``task.n_eval`` and
``trainer.eval_every`` whenever ``trainer.mini_batches > 1``. With one mini-batch the groups keep
their order (no draw: the sampling stream is the same as before this order came from the generator).

The settings travel as one frozen :class:`UpdateSpec` (the loss settings in :class:`LossSpec`),
built once per run from the config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from grpolab import objectives as obj
from grpolab import step_row as K
from grpolab.config import Config, ObjectiveConfig
from grpolab.rollout import response_logprobs
from grpolab.train.nonfinite import check_finite_loss, check_finite_norm, require_finite_model

if TYPE_CHECKING:
    from grpolab.rollout.experience import Experience

__all__ = ["LossSpec", "MetricMeans", "UpdateSpec", "auto_micro_batch_tokens", "micro_batches", "nonzero_rows",
           "update"]

#: activation bytes one micro-batch may hold on CPU when ``trainer.micro_batch_tokens`` is 0 (auto)
CPU_ACTIVATION_BYTES = 1 << 30
#: auto budgets stay within these (tokens); CPU above 4,096 falls out of cache (docs/performance.md)
AUTO_TOKENS_MIN, AUTO_TOKENS_MAX_CPU, AUTO_TOKENS_MAX_GPU = 256, 4096, 32768
#: used when the model does not say its sizes (no ``config.hidden_size`` / ``num_hidden_layers``)
AUTO_TOKENS_FALLBACK = 1024


@dataclass(frozen=True)
class LossSpec:
    """The keyword settings of :func:`grpolab.objectives.policy_loss` for one run (frozen).

    ``objective``: a copy of the run's ``objective`` section, whose loss keys
    (:data:`grpolab.config.ObjectiveConfig.LOSS_KEYS`: one list of names, defaults and checks) go
    to ``policy_loss``. ``max_len`` is the longest possible response (the ``constant``
    aggregation's normaliser): ``env.max_total_tokens`` for multi-turn episodes (model and
    observation tokens), else ``rollout.max_new_tokens``.
    """

    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    max_len: int = 48

    @classmethod
    def from_config(cls, cfg: Config) -> "LossSpec":
        return cls(objective=replace(cfg.objective), max_len=max_response_len(cfg))

    def kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``policy_loss`` (all but the tensors and ``weights``)."""
        return {**self.objective.loss_kwargs(), "max_len": self.max_len}


@dataclass(frozen=True)
class UpdateSpec:
    """Everything :func:`update` needs besides the tensors: the loss and the batching (frozen).

    Each field is the config key of its name (``rollout.temperature``, ``optim.grad_clip``, the
    rest ``trainer.*``) and means what that key's help says (``grpolab config``); here
    ``micro_batch_tokens=0`` is resolved in :func:`update` (``auto_micro_batch_tokens(policy)``),
    and ``grad_clip=0`` still measures the norm."""

    loss: LossSpec
    temperature: float = 1.0
    epochs: int = 1
    mini_batches: int = 1
    micro_batch_size: int = 0
    micro_batch_tokens: int = 0
    skip_zero_advantage: bool = True
    grad_clip: float = 1.0
    share_prompts: bool = True

    @classmethod
    def from_config(cls, cfg: Config) -> "UpdateSpec":
        tr = cfg.trainer
        return cls(loss=LossSpec.from_config(cfg), temperature=cfg.rollout.temperature, epochs=tr.epochs,
                   mini_batches=tr.mini_batches, micro_batch_size=tr.micro_batch_size,
                   micro_batch_tokens=tr.micro_batch_tokens, skip_zero_advantage=tr.skip_zero_advantage,
                   share_prompts=tr.share_prompts,
                   grad_clip=cfg.optim.grad_clip)

    @property
    def on_policy(self) -> bool:
        """One optimizer step per batch: the behaviour log-probs equal the current ones."""
        return self.epochs * self.mini_batches == 1

    @property
    def skips_zero_advantage(self) -> bool:
        """Rows with zero advantage are skipped only without a KL term (with one they still pull)."""
        return self.skip_zero_advantage and self.loss.objective.kl_coef == 0


def max_response_len(cfg: Config) -> int:
    """The longest possible response: the constant aggregation's normaliser (``max_len``).

    Multi-turn episodes hold model and observation tokens in the response, up to
    ``env.max_total_tokens``; single-turn responses are at most ``rollout.max_new_tokens``.
    """
    return cfg.env.max_total_tokens if cfg.env.name else cfg.rollout.max_new_tokens


class MetricMeans:
    """Accumulates token-weighted means (``add``) and per-optimizer-step sums (``add_summed``)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add(self, key: str, value: float, weight: float) -> None:
        self.sums[key] = self.sums.get(key, 0.0) + value * weight
        self.counts[key] = self.counts.get(key, 0.0) + weight

    def means(self) -> dict[str, float]:
        """``sum(value * weight) / sum(weight)`` per key (0 for a key whose weights sum to 0)."""
        return {k: self.sums[k] / max(self.counts[k], 1e-9) for k in self.sums}


SUMMED = ("loss", "pg_loss", "kl")  # per-mini-batch sums; everything else is a token mean
_LATE = ("cum_log_ratio_sq_late", "tokens_late")  # weighted by the late tokens, not all of them


def _group_order(n: int, mini_batches: int, generator: torch.Generator | None) -> list[int]:
    """The groups' order for the mini-batch split: drawn from ``generator`` with several mini-batches;
    with one, the given order (no draw that would shift the training generator's sampling)."""
    return torch.randperm(n, generator=generator).tolist() if mini_batches > 1 else list(range(n))


def update(policy, optimizer, scheduler, exp: "Experience", spec: UpdateSpec, *,
           generator: torch.Generator | None = None) -> dict[str, float]:
    """All optimizer steps for one step's experience; returns token-weighted mean metrics.

    Reads ``exp.rollout``, ``exp.advantages`` (``[B]`` or ``[B,T]``), ``exp.old_logp``
    (``[B,T]``; None = on-policy: the current log-probs, detached, so every ratio is exactly 1),
    ``exp.ref_logp`` (``[B,T]``, for the KL term) and ``exp.prompt_index`` (``[B]``: the
    mini-batches take whole prompt groups). Metrics: the ``policy_loss`` metrics as token means
    over the rows that went through the forward, ``loss``/``pg_loss``/``kl`` as the mean over
    optimizer steps of each mini-batch's loss, ``clip_frac_by_pos/*``, ``cum_log_ratio_rms_by_pos/*`` and
    ``cum_log_ratio_rms_pos_gt100`` (the drift of the behaviour policy by position), ``skipped_rows_frac`` and
    ``grad_norm`` (mean over optimizer steps). The step row holds each as ``update/`` + its name;
    what each means: :data:`grpolab.step_row.STEP_METRICS` (docs/metrics.md).

    ``generator`` shuffles the prompt groups into mini-batches (the trainer passes its training
    RNG; None: torch's global stream, which anything else may draw from).
    """
    rollout, advantages, old_logp, ref_logp = exp.rollout, exp.advantages, exp.old_logp, exp.ref_logp
    if advantages is None:
        raise ValueError("update() needs exp.advantages; compute them first and pass exp.replace(advantages=A)")
    policy.train()
    group_rows = exp.group_rows()  # mini-batches take whole prompt groups
    means, clip_by_pos, drift_by_pos = MetricMeans(), MetricMeans(), MetricMeans()
    losses: dict[str, list[float]] = {}
    grad_norms = []
    skipped = total_rows = 0
    lengths = rollout.attention_mask.sum(-1).long().cpu()  # tokens each row's forward sees (observations too)
    budget = spec.micro_batch_tokens or auto_micro_batch_tokens(policy)
    for _ in range(spec.epochs):
        group_order = _group_order(len(group_rows), spec.mini_batches, generator)
        for mb_groups in np.array_split(group_order, spec.mini_batches):
            rows = torch.cat([group_rows[g] for g in mb_groups])
            mask = rollout.response_mask[rows]
            adv = advantages[rows]
            # normalisers over the whole mini-batch, sliced per micro-batch below
            W = obj.aggregation_weights(mask, spec.loss.objective.aggregation, advantages=adv,
                                        group_ids=rollout.group_ids[rows], max_len=spec.loss.max_len)
            # Rows whose advantage is 0 on every token (groups with all-equal rewards) have a
            # per-token loss of exactly 0, so without a KL term they add nothing to the gradient:
            # skip their forward/backward. W still comes from the whole mini-batch, so the
            # gradient is unchanged; only the logged entropy/ratio statistics cover fewer rows.
            keep = nonzero_rows(adv, mask) if spec.skips_zero_advantage else torch.arange(len(rows))
            skipped += len(rows) - len(keep)
            total_rows += len(rows)
            optimizer.zero_grad(set_to_none=False)  # zeros, not None: AdamW steps every parameter
            mb_losses: dict[str, float] = {}
            for idx in micro_batches(keep, lengths[rows], spec.micro_batch_size, budget):
                sub = rows[idx]
                m, n_tok = _forward_backward(policy, rollout.select(sub), advantages[sub],
                                             None if old_logp is None else old_logp[sub],
                                             None if ref_logp is None else ref_logp[sub], W[idx], spec)
                for k, v in m.items():
                    if k in SUMMED:  # micro-batch parts of one mini-batch loss add up
                        mb_losses[k] = mb_losses.get(k, 0.0) + v.item()
                    elif v.dim() == 0 and k not in _LATE:  # token means: weight by tokens
                        means.add(k, v.item(), n_tok)
                for b, (c, q, t) in enumerate(zip(m["clip_frac_by_pos"].tolist(),
                                                  m["cum_log_ratio_sq_by_pos"].tolist(), m["tokens_by_pos"].tolist())):
                    clip_by_pos.add(str(b), c, t)
                    drift_by_pos.add(str(b), q, t)
                drift_by_pos.add("late", m["cum_log_ratio_sq_late"].item(), m["tokens_late"].item())
            grad_norms.append(_optimizer_step(policy, optimizer, scheduler, spec.grad_clip))
            for k in SUMMED:
                losses.setdefault(k, []).append(mb_losses.pop(k, 0.0))
    policy.eval()
    out = means.means()
    out.update({k: float(np.mean(v)) for k, v in losses.items()})  # mean over optimizer steps
    labels = obj.position_bucket_labels()
    out.update({K.stat_name(K.UPDATE, K.UPDATE_CLIP_BY_POS, labels[int(b)]): v for b, v in clip_by_pos.means().items()
                if clip_by_pos.counts[b] > 0})
    # the spread (root mean square) of the cumulative log ratio: how far the behaviour policy has
    # drifted by each position (0 on-policy at the first optimizer step)
    drift = drift_by_pos.means()
    out.update({K.stat_name(K.UPDATE, K.UPDATE_DRIFT_BY_POS, labels[int(b)]): float(np.sqrt(drift[b])) for b in drift
                if b != "late" and drift_by_pos.counts[b] > 0})
    if drift_by_pos.counts.get("late", 0) > 0:
        out[K.stat_name(K.UPDATE, K.UPDATE_DRIFT_LATE, str(obj.LATE_POSITION))] = float(np.sqrt(drift["late"]))
    out[K.stat_name(K.UPDATE, K.UPDATE_SKIPPED_ROWS_FRAC)] = skipped / max(total_rows, 1)
    out[K.stat_name(K.UPDATE, K.UPDATE_GRAD_NORM)] = float(np.mean(grad_norms))
    return out


def _forward_backward(policy, part, adv, old_logp, ref_logp, W, spec: UpdateSpec):
    """One micro-batch: forward, loss, backward. Returns ``(metrics, response tokens)``."""
    lp = response_logprobs(policy, part, temperature=spec.temperature, return_entropy=True,
                           share_prompts=spec.share_prompts)
    loss, m = obj.policy_loss(
        lp.logp, lp.logp.detach() if old_logp is None else old_logp, adv, part.response_mask,
        group_ids=part.group_ids, ref_logp=ref_logp, weights=W, **spec.loss.kwargs(),
    )
    check_finite_loss(loss)  # a NaN loss never reaches the gradient (grpolab.train.nonfinite)
    loss.backward()
    n_tok = float(part.response_mask.sum())
    valid = part.response_mask.bool()
    m[K.stat_name(K.UPDATE, K.UPDATE_ENTROPY)] = lp.entropy.detach()[valid].sum() / max(n_tok, 1.0)
    return m, n_tok


def _optimizer_step(policy, optimizer, scheduler, grad_clip: float) -> float:
    """Clip, step the optimizer and the schedule; returns the gradient norm before clipping.

    Raises :class:`~grpolab.train.nonfinite.NonFiniteError` for a non-finite gradient norm (before
    the step) or non-finite trainable weights (after it)."""
    for p in policy.parameters():  # a mini-batch with nothing to learn still steps AdamW
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    gn = float(torch.nn.utils.clip_grad_norm_(policy.parameters(), grad_clip if grad_clip > 0 else float("inf")))
    check_finite_norm(gn)  # before the step: the weights stay finite
    optimizer.step()
    scheduler.step()
    require_finite_model(policy, "weights after the optimizer step", trainable_only=True)
    return gn


def auto_micro_batch_tokens(model: torch.nn.Module, budget_bytes: int | None = None) -> int:
    """The micro-batch token budget ``trainer.micro_batch_tokens = 0`` stands for.

    The update's saved activations grow linearly with the tokens of a micro-batch: per token and
    layer about ``4 x intermediate + 8 x hidden`` values (the MLP's wide tensors, the norms' and
    attention's hidden-wide ones; measured on SmolLM2-135M: about 11,000 floats for 4 x 1,536 + 8 x 576
    = 10,752; docs/performance.md, "Memory"). The budget is ``budget_bytes`` (default: 1 GiB on CPU,
    an eighth of the device's memory on a GPU) over that, rounded to the nearest power of two and
    kept within [256, 4,096] tokens on CPU ([256, 32,768] on a GPU). SmolLM2-135M gets 1,024; the
    tiny default model 4,096 (where larger micro-batches are faster: fewer small forwards).
    """
    cfg = getattr(model, "config", None)
    hidden = getattr(cfg, "hidden_size", None)
    layers = getattr(cfg, "num_hidden_layers", None)
    param = next(iter(model.parameters()), None)
    if not isinstance(hidden, int) or not isinstance(layers, int) or param is None:
        return AUTO_TOKENS_FALLBACK
    inter = getattr(cfg, "intermediate_size", None)
    inter = inter if isinstance(inter, int) and inter > 0 else 4 * hidden
    per_token = param.element_size() * layers * (4 * inter + 8 * hidden)
    gpu = param.device.type == "cuda"
    if budget_bytes is None:
        budget_bytes = torch.cuda.get_device_properties(param.device).total_memory // 8 if gpu else CPU_ACTIVATION_BYTES
    tokens = 2 ** round(math.log2(max(budget_bytes / per_token, 1.0)))
    return int(min(AUTO_TOKENS_MAX_GPU if gpu else AUTO_TOKENS_MAX_CPU, max(AUTO_TOKENS_MIN, tokens)))


def micro_batches(keep: torch.Tensor, lengths: torch.Tensor, rows_per_micro: int,
                  token_budget: int) -> list[torch.Tensor]:
    """Split the row indices ``keep`` into micro-batches for gradient accumulation.

    Rows are sorted by length, so each micro-batch is padded only to its own longest row (the
    forward trims all-padding columns); that removes most padding FLOPs when lengths vary. With
    ``rows_per_micro > 0`` micro-batches have that many rows; otherwise they are filled greedily
    up to ``token_budget`` padded tokens (at least one row each), then evened out: the rows are
    refilled with at most ``ceil(rows / parts)`` each when that needs no more micro-batches than
    the greedy fill (24 rows of 196 tokens under 2,048: 8 + 8 + 8 instead of 10 + 10 + 4, so the
    largest micro-batch, which sets the peak memory of the update, holds 20% fewer activations for
    the same number of forwards). The aggregation weights are computed once per mini-batch, so the
    partition changes neither the loss nor the gradient.
    """
    if len(keep) == 0:
        return []
    order = keep[torch.argsort(lengths[keep], descending=True, stable=True)]
    if rows_per_micro > 0:
        return [order[i : i + rows_per_micro] for i in range(0, len(order), rows_per_micro)]
    lens = lengths[order].tolist()
    greedy = _fill(lens, token_budget, len(lens))
    even = _fill(lens, token_budget, -(-len(lens) // len(greedy)))
    bounds = even if len(even) <= len(greedy) else greedy
    return [order[a:b] for a, b in bounds]


def _fill(lens_desc: list[int], token_budget: int, max_rows: int) -> list[tuple[int, int]]:
    """Greedy ``[start, end)`` runs over lengths sorted descending: each run holds at most
    ``max_rows`` rows and, beyond its first row, at most ``token_budget`` padded tokens."""
    out, start = [], 0
    for i in range(1, len(lens_desc) + 1):
        if i == len(lens_desc) or i + 1 - start > max_rows or (i + 1 - start) * lens_desc[start] > token_budget:
            out.append((start, i))
            start = i
    return out


def nonzero_rows(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Indices of rows with a non-zero advantage on some valid token: ``[B] or [B,T] -> [K]``."""
    adv_BT = adv.unsqueeze(-1).expand_as(mask) if adv.dim() == 1 else adv
    return ((adv_BT != 0) & mask.bool()).any(-1).nonzero().squeeze(-1).cpu()
