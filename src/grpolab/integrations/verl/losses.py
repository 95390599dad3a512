"""grpolab's objectives inside verl (https://github.com/volcengine/verl, tested with 0.9.1).

verl is imported lazily: importing this module costs nothing; :func:`register` imports
``verl.trainer.ppo.core_algos`` and adds grpolab's pieces to verl's own registries.

Policy losses (``actor_rollout_ref.actor.policy_loss.loss_mode=<name>``), all with verl's exact
loss-function signature ``(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config, rollout_is_weights) -> (loss, metrics)``:

- ``ctpo``: CTPO (arXiv 2605.07331): cumulative prefix ratio with position-adaptive clipping at
  CTPO's defaults (``clip_low=0.025, clip_high=0.05, clip_power=0.5``; verl's ``clip_ratio_*``
  are ignored, they are fixed-clip bounds).
- ``grpolab`` (token ratio), ``grpolab_sequence``, ``grpolab_gspo``, ``grpolab_cumulative``:
  grpolab's :func:`~grpolab.objectives.policy_loss` at that ratio level, clip from the actor
  config (``clip_ratio_low`` / ``clip_ratio_high``, falling back to ``clip_ratio``; dual clip
  ``clip_ratio_c``; for ``grpolab_cumulative`` the bounds are CTPO's log-space bounds with
  ``clip_power=0.5``). verl's config schema has no free field for a ratio level, hence one
  name per level.

Every loss aggregates with verl's ``loss_agg_mode`` and verl's *global* normalisers
(``config.global_batch_info``: ``dp_size``, ``batch_num_tokens``, ``global_batch_size``,
``loss_scale_factor``), written as aggregation weights ``W[B,T]`` by
:func:`verl_aggregation_weights` so that ``loss = sum W * l`` equals ``verl.core_algos.agg_loss``
exactly: summing micro-batches and averaging data-parallel ranks reproduces the full-batch loss.

Balanced aggregation (BA, arXiv 2605.04077) needs the prompt groups, which verl's loss never sees.
The advantage estimator ``grpolab_balanced`` (``algorithm.adv_estimator=grpolab_balanced``)
computes GRPO advantages and folds the BA weights into them (docs/methods.md, "Aggregation"; the clipped
surrogate is positively homogeneous in ``A``): ``A_t = A_i * W_BA[i,t] * B`` with ``B`` the number
of rows of the training batch. With ``loss_agg_mode=seq-mean-token-sum`` verl divides the token
sum by the mini-batch size ``B_mini``, so each token weighs ``W_BA[i,t] * B / B_mini``: exactly BA
when the mini-batch is the whole batch, and BA over each mini-batch's share of groups otherwise.
It holds across micro-batches and data-parallel ranks because every factor is per token or a
global constant. See docs/scale-out.md for the recipe and what it does not cover (the KL and
entropy terms verl adds are aggregated by ``loss_agg_mode``, not by BA).

RLSD / GEAR: :func:`apply_credit` reweights verl's token-level advantages (GRPO or BA-folded)
given the teacher's log-probs of the sampled tokens. verl 0.9 has no plug-in hook that runs a
forward on *other prompts* (the privileged teacher prompt) -- its advantage estimators see only
rewards, mask, uid and the algorithm config, and its distillation teachers score the student's own
prompt -- so the teacher forward is a trainer extension: :mod:`grpolab.integrations.verl.credit`
(launched with ``python -m grpolab.integrations.verl.main``; docs/scale-out.md, "RLSD / GEAR in
verl").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from grpolab.objectives import aggregation_weights, credit_advantages, group_advantages, policy_loss

#: CTPO's defaults (arXiv 2605.07331): log-space bounds ``[-clip_low s_t, clip_high s_t]``,
#: ``s_t = pos_t ** clip_power``.
CTPO_DEFAULTS: dict[str, float] = {"clip_low": 0.025, "clip_high": 0.05, "clip_power": 0.5}
#: verl policy-loss name -> grpolab ratio level.
POLICY_LOSSES: dict[str, str] = {
    "ctpo": "cumulative",
    "grpolab": "token",
    "grpolab_sequence": "sequence",
    "grpolab_gspo": "gspo",
    "grpolab_cumulative": "cumulative",
}
#: verl advantage-estimator name of GRPO advantages with BA weights folded in.
BALANCED_ESTIMATOR = "grpolab_balanced"
#: the ``loss_agg_mode`` the BA recipe needs.
BALANCED_LOSS_AGG_MODE = "seq-mean-token-sum"
VERL_LOSS_AGG_MODES = (
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean",
)


def verl_aggregation_weights(
    mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    dp_size: int = 1,
    batch_num_tokens: int | float | torch.Tensor | None = None,
    global_batch_size: int | float | torch.Tensor | None = None,
    loss_scale_factor: int | float | None = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """verl's ``agg_loss`` written as weights: ``agg_loss(l, mask, mode, **info) == (W * l).sum()``.

    Args:
        mask: ``[B,T]`` response (loss) mask of one micro-batch, bool or float.
        loss_agg_mode: one of :data:`VERL_LOSS_AGG_MODES`.
        dp_size, batch_num_tokens, global_batch_size, loss_scale_factor: verl's global batch info
            (``config.global_batch_info``); ``None`` means "this micro-batch is the whole batch",
            which verl only allows with ``dp_size == 1``.
        dtype: dtype of ``W`` and of the arithmetic (default: ``mask``'s if floating, else float32).

    Returns:
        ``W[B,T]``, 0 where ``mask`` is 0.
    """
    if loss_agg_mode not in VERL_LOSS_AGG_MODES:
        raise ValueError(f"unknown verl loss_agg_mode {loss_agg_mode!r}; expected one of {VERL_LOSS_AGG_MODES}")
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape [B,T]; got {tuple(mask.shape)}")
    m = mask.detach()
    if dtype is None:
        dtype = m.dtype if m.is_floating_point() else torch.float32
    m = m.to(dtype)
    dp = float(dp_size)

    def _need(value, name: str):
        if value is None:
            if dp_size > 1:
                raise ValueError(f"verl loss_agg_mode={loss_agg_mode!r} with dp_size > 1 needs the global {name}")
            return None
        return torch.as_tensor(value, dtype=m.dtype, device=m.device)

    if loss_agg_mode == "token-mean":
        n_tok = _need(batch_num_tokens, "batch_num_tokens")
        n_tok = m.sum() if n_tok is None else n_tok
        return m / n_tok * dp
    if loss_agg_mode == "token-sum":
        return m * dp
    length_B = m.sum(-1)
    n_seq = _need(global_batch_size, "global_batch_size")
    n_seq = (length_B > 0).to(m.dtype).sum() if n_seq is None else n_seq
    if loss_agg_mode == "seq-mean-token-mean":
        # verl divides by (|o| + 1e-8) with |o| an integer count of its bool mask: in float32 that is
        # exactly |o| for |o| >= 1, and 0 / 1e-8 = 0 for an empty row, i.e. |o| clamped at 1
        return m / length_B.clamp_min(1).unsqueeze(-1) / n_seq * dp
    W = m / n_seq * dp
    if loss_agg_mode == "seq-mean-token-sum-norm":
        W = W / float(m.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return W


def _cfg(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    return default if value is None else value


def _clip_from_config(config: Any, ratio: str) -> dict[str, Any]:
    clip = _cfg(config, "clip_ratio", 0.2)
    low = _cfg(config, "clip_ratio_low", clip)
    high = _cfg(config, "clip_ratio_high", clip)
    return {
        "clip_low": float(low),
        "clip_high": float(high),
        "dual_clip": float(_cfg(config, "clip_ratio_c", 3.0)),
        "clip_power": CTPO_DEFAULTS["clip_power"],
    }


def make_policy_loss(name: str):
    """The verl policy-loss function registered as ``name`` (a key of :data:`POLICY_LOSSES`)."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown grpolab verl loss {name!r}; expected one of {sorted(POLICY_LOSSES)}")
    ratio = POLICY_LOSSES[name]

    def grpolab_policy_loss(
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """verl policy loss (tensors ``[B,T]``): grpolab's clipped surrogate, verl's global aggregation."""
        if name == "ctpo":
            hp = {**CTPO_DEFAULTS, "dual_clip": None}
        else:
            hp = _clip_from_config(config, ratio)
        info = dict(_cfg(config, "global_batch_info", {}) or {})
        W = verl_aggregation_weights(
            response_mask, loss_agg_mode,
            dp_size=int(info.get("dp_size") or 1),
            batch_num_tokens=info.get("batch_num_tokens"),
            global_batch_size=info.get("global_batch_size"),
            loss_scale_factor=info.get("loss_scale_factor"),
            dtype=log_prob.dtype,
        )
        if rollout_is_weights is not None:  # verl's rollout correction multiplies the per-token loss
            W = W * rollout_is_weights.detach().to(W.dtype)
        loss, m = policy_loss(
            log_prob, old_log_prob, advantages, response_mask,
            ratio=ratio, weights=W, clip_low=hp["clip_low"], clip_high=hp["clip_high"],
            dual_clip=hp["dual_clip"], clip_power=hp["clip_power"],
        )
        metrics = {
            "actor/pg_clipfrac": m["clip_frac"].item(),
            "actor/ppo_kl": m["approx_kl"].item(),
            "actor/pg_clipfrac_lower": m["clip_frac_dual"].item(),
            "actor/grpolab/clip_frac_low": m["clip_frac_low"].item(),
            "actor/grpolab/clip_frac_high": m["clip_frac_high"].item(),
            "actor/grpolab/ratio_mean": m["ratio_mean"].item(),
        }
        return loss, metrics

    grpolab_policy_loss.__name__ = f"grpolab_policy_loss_{name}"
    grpolab_policy_loss.__qualname__ = grpolab_policy_loss.__name__
    return grpolab_policy_loss


def group_ids_from_index(index) -> torch.Tensor:
    """verl's ``index`` (``non_tensor_batch["uid"]``, any hashable per row) -> ``[B]`` long group ids."""
    seen: dict[Any, int] = {}
    return torch.tensor([seen.setdefault(u, len(seen)) for u in list(np.asarray(index, dtype=object))],
                        dtype=torch.long)


def balanced_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    *,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages with Balanced-Aggregation weights folded in (verl estimator signature core).

    Args:
        token_level_rewards: ``[B,T]``; the sequence reward is its row sum (verl's convention).
        response_mask: ``[B,T]``.
        index: ``[B]`` prompt uid per row (``data.non_tensor_batch["uid"]``).
        norm_adv_by_std_in_grpo: divide by the group std (GRPO) or not (Dr.GRPO).
        epsilon: added to the std.

    Returns:
        ``(advantages [B,T], returns [B,T])``, both ``A_i * W_BA[i,t] * B`` (0 where masked); to be
        aggregated with ``loss_agg_mode="seq-mean-token-sum"`` (see the module docstring).
    """
    if token_level_rewards.dim() != 2 or response_mask.shape != token_level_rewards.shape:
        raise ValueError(
            f"token_level_rewards and response_mask must share shape [B,T]; got "
            f"{tuple(token_level_rewards.shape)} and {tuple(response_mask.shape)}"
        )
    gids = group_ids_from_index(index).to(token_level_rewards.device)
    if gids.numel() != token_level_rewards.shape[0]:
        raise ValueError(f"index has {gids.numel()} entries for {token_level_rewards.shape[0]} rows")
    with torch.no_grad():
        scores_B = token_level_rewards.sum(-1)
        adv_B = group_advantages(scores_B, gids, normalize_std=norm_adv_by_std_in_grpo, eps=epsilon)
        mask = response_mask.to(scores_B.dtype)
        W = aggregation_weights(mask, "balanced", advantages=adv_B, group_ids=gids).to(scores_B.dtype)
        adv_BT = adv_B.unsqueeze(-1) * W * float(mask.shape[0])
    return adv_BT, adv_BT


def apply_credit(
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    method: str = "rlsd",
    lam: float = 0.5,
    eps_w: float = 0.2,
    negative_only: bool = False,
    divergence: torch.Tensor | None = None,
    **gear_kwargs: Any,
) -> torch.Tensor:
    """RLSD / GEAR on verl's batch fields: ``data.batch["advantages"]`` -> reweighted ``[B,T]``.

    Args:
        advantages: ``[B,T]`` verl advantages (GRPO, or ``grpolab_balanced``'s folded ones: the
            clipped surrogate is positively homogeneous, so credit and BA weights commute).
        old_log_probs: ``[B,T]`` the student's log-probs of the sampled tokens (verl's
            ``old_log_probs``).
        teacher_log_probs: ``[B,T]`` the same tokens under the privileged teacher prompt.
        response_mask: ``[B,T]``.
        method: ``rlsd | gear``; the other arguments as in :func:`grpolab.objectives.credit_advantages`.

    Returns:
        ``[B,T]`` advantages of the dtype of ``advantages``, 0 where masked.
    """
    if method not in ("rlsd", "gear"):
        raise ValueError(f"method={method!r}; choose rlsd or gear")
    res = credit_advantages(method, advantages, old_log_probs.detach(), teacher_log_probs.detach(), response_mask,
                            lam=lam, eps_w=eps_w, negative_only=negative_only, divergence=divergence, **gear_kwargs)
    return res.advantages.to(advantages.dtype)


def _balanced_estimator(token_level_rewards, response_mask, index=None, config=None, **_: Any):
    """verl advantage estimator ``grpolab_balanced`` (see :func:`balanced_advantages`)."""
    if index is None:
        raise ValueError("grpolab_balanced needs the prompt uid of every row (data.non_tensor_batch['uid'])")
    return balanced_advantages(
        token_level_rewards, response_mask, index,
        norm_adv_by_std_in_grpo=bool(_cfg(config, "norm_adv_by_std_in_grpo", True)),
    )


def register() -> list[str]:
    """Register grpolab's policy losses and the ``grpolab_balanced`` estimator in verl (idempotent).

    Returns:
        The names registered: the keys of :data:`POLICY_LOSSES` and :data:`BALANCED_ESTIMATOR`.
    """
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as e:  # pragma: no cover - exercised only without verl
        raise ImportError(
            "grpolab.integrations.verl.losses needs verl>=0.9: pip install 'grpolab[verl]'"
        ) from e
    for name in POLICY_LOSSES:
        fn = core_algos.POLICY_LOSS_REGISTRY.get(name)
        if fn is None or not getattr(fn, "__grpolab__", False):
            fn = make_policy_loss(name)
            fn.__grpolab__ = True  # type: ignore[attr-defined]
            core_algos.register_policy_loss(name)(fn)
    existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(BALANCED_ESTIMATOR)
    if existing is None or not getattr(existing, "__grpolab__", False):
        _balanced_estimator.__grpolab__ = True  # type: ignore[attr-defined]
        core_algos.ADV_ESTIMATOR_REGISTRY[BALANCED_ESTIMATOR] = _balanced_estimator
    return [*POLICY_LOSSES, BALANCED_ESTIMATOR]


def trl_has_value_head() -> bool:
    """Whether the installed TRL still ships ``AutoModelForCausalLMWithValueHead`` (TRL 1.16 does not)."""
    import importlib.util

    if importlib.util.find_spec("trl") is None:
        return False
    try:
        from trl.experimental.ppo import AutoModelForCausalLMWithValueHead  # noqa: F401
        return True
    except ImportError:
        pass
    try:
        from trl import AutoModelForCausalLMWithValueHead  # noqa: F401,F811
        return True
    except ImportError:
        return False


def guard_trl_value_head() -> None:
    """Let verl 0.9 build models next to TRL 1.16 (``grpolab[verl,trl]``).

    verl asks ``verl.utils.import_utils.is_trl_available()`` and, if TRL is importable, imports
    TRL's ``AutoModelForCausalLMWithValueHead`` to patch its ``state_dict`` (every actor and
    reference model build, ``verl/models/transformers/monkey_patch.py``) or to wrap a critic
    (``verl/utils/model.py``). TRL 1.16 removed that class, so with both installed every verl model
    build fails with an ImportError. This replaces verl's check with "TRL is importable *and* has
    the value-head model" (what verl's code actually needs), in ``verl.utils.import_utils`` and in
    the verl modules that already imported the name. With TRL 1.16 the state_dict patch is then
    skipped -- there is no such model to patch -- and a critic that would need TRL's value-head
    wrapper gets verl's own "install trl" error instead of an ImportError. Idempotent.
    """
    import functools
    import sys

    import verl.utils.import_utils as iu

    if getattr(iu.is_trl_available, "__grpolab__", False):
        return
    base = iu.is_trl_available

    @functools.cache
    def is_trl_available() -> bool:
        return bool(base()) and trl_has_value_head()

    is_trl_available.__grpolab__ = True  # type: ignore[attr-defined]
    iu.is_trl_available = is_trl_available
    for name in ("verl.models.transformers.monkey_patch", "verl.utils.model"):
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "is_trl_available", None) is base:
            mod.is_trl_available = is_trl_available
