"""RLSD and GEAR inside verl: the privileged teacher forward as a verl 0.9.x trainer extension.

RLSD (arXiv 2604.03128) and GEAR (arXiv 2605.11853) reweight each token's advantage by how much
more (or less) likely a *privileged teacher* -- the same model shown the reference solution -- finds
the token the student sampled (docs/methods.md, "Token-level credit from a privileged self-teacher"). verl's advantage estimators see
only rewards, masks and uids, so the teacher forward cannot be a plug-in: this module extends
verl's v1 trainer (``verl.trainer.ppo.v1.PPOTrainer``, verl ``>=0.9.1,<0.10``) instead. After
verl has computed ``advantages`` (any estimator: ``grpo``, ``grpolab_balanced``, ...), each step

1. reads the rows' ``responses``, ``response_mask``, ``old_log_probs``, ``advantages``,
   ``raw_prompt`` and ``extra_info`` from verl's TransferQueue;
2. keeps the rows whose advantage is not 0 (a zero advantage stays zero whatever the weight);
3. builds each kept row's teacher prompt with :func:`grpolab.teacher_text.teacher_messages`
   (the row's chat with the privileged text, taken from ``extra_info[privileged_key]``, in its
   last user message through ``chat_template`` or in a system note through ``system_template``,
   as ``privileged_placement`` says) and tokenises it with verl's own chat-template builder, the
   one the agent loop used for the student prompt;
4. lays out ``[teacher prompt (left-padded) ; response (right-padded)]`` as verl's classic padded
   batch and asks the teacher's worker group for the log-probs of exactly the response tokens
   (``teacher=frozen``: ``compute_ref_log_prob`` on the reference worker, the initial policy;
   ``teacher=live``: ``compute_log_prob`` on the actor), through verl's own padding converters;
5. applies :func:`grpolab.objectives.credit_advantages` (``rlsd`` / ``gear``) to ``advantages``
   with ``old_log_probs`` as the student's log-probs, and writes the advantages back.

Enable it with a ``grpolab.credit`` section in the verl config (:class:`VerlCreditConfig`: grpolab's
one credit schema, :class:`grpolab.config.CreditConfig`, plus ``privileged_key``) and launch with ``python -m grpolab.integrations.verl.main`` (docs/scale-out.md, "RLSD / GEAR in verl").

Where this deviates from grpolab's own trainer (:mod:`grpolab.train.credit`):

- the frozen teacher is verl's reference worker, i.e. the *initial* policy; verl 0.9.1 has no call
  that copies the actor's weights into the reference worker, so it is never re-synced
  (``teacher_sync_every`` is 0 here; ``teacher=live`` is the teacher synced every step);
- GEAR uses the sampled-token divergence ``|teacher_logp - student_logp|`` (``divergence=logratio``):
  verl's log-prob workers return the sampled tokens' log-probs only, never the full-vocabulary
  distributions a per-position KL needs, so ``divergence=kl`` is refused at config time
  (:data:`VERL_FIXED`, :data:`VERL_UNUSED`);
- the leakage counters are not implemented.

Nothing here runs at import: verl, ``transfer_queue`` and Ray are imported inside the functions.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Mapping, Sequence

import torch

from grpolab import objectives as obj
from grpolab.config import ConfigError, CreditConfig
from grpolab.objectives.credit_row import credit_step_metrics
from grpolab.teacher_text import CreditTokens, teacher_messages
from grpolab.utils.teacher_templates import DEFAULT_CHAT_TEACHER_TEMPLATE

#: The verl releases this extension is written against (it overrides v1-trainer internals).
VERL_SPEC = ">=0.9.1,<0.10"
VERL_MIN, VERL_MAX = (0, 9, 1), (0, 10)
#: Config section of the extension inside verl's Hydra config.
CONFIG_KEY = "grpolab.credit"
#: Credit methods this extension runs (``opsd`` is grpolab's own trainer's only).
METHODS = ("rlsd", "gear")
#: The teacher's last user message (``chat_template``): the same text as grpolab's own trainer and
#: the TRL adapter use (:data:`grpolab.utils.teacher_templates.DEFAULT_CHAT_TEACHER_TEMPLATE`).
DEFAULT_TEMPLATE = DEFAULT_CHAT_TEACHER_TEMPLATE


class VerlVersionError(RuntimeError):
    """The installed verl is not a release this extension is written against."""


# ---------------------------------------------------------------------------------------------
# version and config


def _parse_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if digits != piece:  # 0.9.1rc1 -> (0, 9, 1): a pre-release counts as its release
            break
    return tuple(parts)


def check_verl_version(version: str | None = None) -> str:
    """Raise :class:`VerlVersionError` unless verl ``>=0.9.1,<0.10`` is installed; return its version.

    ``version`` overrides the installed one (tests). Reads the package metadata only: verl is
    not imported, so a broken or foreign verl fails here, before Ray or any worker starts.
    """
    if version is None:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as _version

        try:
            version = _version("verl")
        except PackageNotFoundError:
            raise VerlVersionError(
                f"verl is not installed; the grpolab credit extension needs verl{VERL_SPEC}: "
                "pip install 'grpolab[verl]'"
            ) from None
    v = _parse_version(version)
    if not (VERL_MIN <= v < VERL_MAX):
        raise VerlVersionError(
            f"grpolab's verl credit extension is written against verl{VERL_SPEC} (it overrides "
            f"verl.trainer.ppo.v1.PPOTrainer._compute_advantage and calls the worker groups' log-prob "
            f"methods, which change between releases); found verl {version}. Install a 0.9.x release: "
            f"pip install 'verl{VERL_SPEC}' (or 'grpolab[verl]')"
        )
    return version


@dataclass
class VerlCreditConfig(CreditConfig):
    """The ``grpolab.credit`` section of a verl config (``+grpolab.credit.name=rlsd`` ...).

    grpolab's one credit schema (:class:`grpolab.config.CreditConfig`: the same keys, defaults,
    spellings and validation as the own trainer's ``credit`` section and the TRL adapter's
    ``grpolab_credit_*`` arguments) plus ``privileged_key``, the key of each dataset row's
    ``extra_info`` that holds the privileged text (the example's data: ``solution``). Where verl's
    workers decide, the setting has one possible value here (:data:`VERL_FIXED`); another value,
    or a key verl has no use for (:data:`VERL_UNUSED`), is refused with the reason.

    ``teacher=frozen`` is verl's reference worker (the initial policy, created even when no KL
    uses it); ``live`` is the actor. ``name=grpo`` (no credit) runs verl's plain trainer.
    """

    teacher_sync_every: int = 0
    divergence: str = "logratio"
    privileged_key: str = "solution"

    def validate(self, prefix: str = CONFIG_KEY + ".") -> "VerlCreditConfig":
        """Raise ``ValueError`` (:class:`grpolab.config.ConfigError`) naming the key and the fix; return ``self``."""
        super().validate(prefix)
        if self.name not in METHODS + ("grpo",):
            raise ConfigError(f"{prefix}name={self.name!r} is grpolab's own trainer's only; inside verl choose one "
                              f"of: {', '.join(METHODS)} (or grpo: no credit)")
        for key, (value, why) in VERL_FIXED.items():
            if getattr(self, key) != value:
                raise ConfigError(f"{prefix}{key}={getattr(self, key)!r}: inside verl only {value!r} is possible: "
                                  f"{why}")
        defaults = CreditConfig()
        for key, why in VERL_UNUSED.items():
            if getattr(self, key) != getattr(defaults, key):
                raise ConfigError(f"{prefix}{key} is not used inside verl: {why}")
        if not isinstance(self.privileged_key, str) or not self.privileged_key:
            raise ConfigError(f"{prefix}privileged_key must name the extra_info field with the privileged text, "
                              f"e.g. +{prefix}privileged_key=solution")
        return self

    @classmethod
    def from_mapping(cls, section: Mapping[str, Any], *, prefix: str = CONFIG_KEY + ".") -> "VerlCreditConfig":
        """Build and validate from a mapping (the ``grpolab.credit`` section); unknown keys are refused."""
        return super().from_mapping(section, prefix=prefix)

    @classmethod
    def from_verl_config(cls, config: Any) -> "VerlCreditConfig | None":
        """The validated section of a verl (OmegaConf) config; None when ``grpolab.credit`` is absent or
        says ``name=grpo`` (no credit: verl's plain trainer)."""
        from omegaconf import OmegaConf

        section = OmegaConf.select(config, CONFIG_KEY, default=None)
        if section is None:
            return None
        if not OmegaConf.is_dict(section):
            raise ValueError(f"{CONFIG_KEY} must be a mapping (e.g. +{CONFIG_KEY}.name=rlsd), got {section!r}")
        values = OmegaConf.to_container(section, resolve=True)
        if "name" not in values:
            raise ValueError(f"{CONFIG_KEY} has settings but no name: set +{CONFIG_KEY}.name=rlsd or gear "
                             "(grpo = no credit)")
        cfg = cls.from_mapping(values)
        return cfg if cfg.enabled else None


#: Settings that verl's workers decide: the one possible value inside verl, and why.
VERL_FIXED: dict[str, tuple[Any, str]] = {
    "teacher_sync_every": (0, "verl 0.9 has no call that copies the actor's weights into the reference worker, "
                              "so the frozen teacher is the initial policy (teacher=live is the every-step sync)"),
    "divergence": ("logratio", "verl's log-prob workers return the sampled tokens' log-probs, not the "
                               "full-vocabulary distributions a per-position KL needs (use the TRL adapter or "
                               "grpolab's own trainer for divergence=kl)"),
}
#: Keys of the schema that verl has no use for, and why (a value other than the default is refused).
VERL_UNUSED: dict[str, str] = {
    "template": f"every verl prompt is a chat: the teacher's user turn is {CONFIG_KEY}.chat_template (the "
                "verl extension called it template before)",
    "chunk_size": "it chunks the full-vocabulary KL, which verl does not compute (divergence=logratio)",
    "micro_batch_size": "verl's workers batch the teacher forward "
                        "(actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu)",
}


# ---------------------------------------------------------------------------------------------
# the teacher prompt


def privileged_text(extra_info: Any, key: str, *, row: int | None = None) -> str:
    """``extra_info[key]`` as a non-empty string, or a ``KeyError`` that names the key and the fix."""
    where = "" if row is None else f" (row {row})"
    if not isinstance(extra_info, Mapping) or key not in extra_info:
        have = sorted(extra_info) if isinstance(extra_info, Mapping) else type(extra_info).__name__
        raise KeyError(
            f"grpolab credit needs the privileged text in each row's extra_info[{key!r}]{where}; the row's "
            f"extra_info has {have}. Add it to the data (examples/verl/prepare_math.py keeps MATH's worked "
            f"solution there) or set +{CONFIG_KEY}.privileged_key=<the key>"
        )
    value = extra_info[key]
    if not isinstance(value, str) or not value.strip():
        raise KeyError(f"extra_info[{key!r}]{where} must be a non-empty string, got {value!r}")
    return value


class TeacherPromptEncoder:
    """Tokenises teacher chats the way verl's agent loop tokenised the student prompt.

    verl 0.9 renders every rollout prompt through its "Continuous Token" builder (the tokenizer's
    chat template, ``add_generation_prompt=True``, ``data.apply_chat_template_kwargs``, plus
    per-model-family boundary handling). The teacher prompt goes through the same builder.
    """

    def __init__(self, tokenizer, *, chat_template_kwargs: Mapping[str, Any] | None = None,
                 hf_model_type: str | None = None) -> None:
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

        self.tokenizer = tokenizer
        self.builder = create_continuous_token_builder(
            tokenizer, hf_model_type=hf_model_type, chat_template_kwargs=dict(chat_template_kwargs or {}))

    def __call__(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return [int(t) for t in self.builder.build_initial_tokens(list(messages))]


# ---------------------------------------------------------------------------------------------
# the teacher batch and the worker call


def build_teacher_batch(
    teacher_prompt_ids: Sequence[Sequence[int]],
    responses: torch.Tensor,
    response_lengths: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    pad_token_id: int,
):
    """verl's classic padded batch of ``[teacher prompt ; response]`` rows (a ``DataProto``).

    Args:
        teacher_prompt_ids: ``b`` token lists (any lengths >= 1).
        responses: ``[b,T]`` long, the sampled response tokens (right-padded).
        response_lengths: ``[b]`` long, real tokens per response (policy and, in multi-turn
            rollouts, observation tokens: they are attended to, as in verl's own forward).
        response_mask: ``[b,T]``, 1 on the tokens whose log-prob counts.
        pad_token_id: the id written into padding positions (never attended to).

    Returns:
        ``DataProto`` with ``prompts [b,P']`` (left-padded), ``responses [b,T]``,
        ``input_ids [b,P'+T]``, ``attention_mask``, ``position_ids`` (cumulative mask - 1, verl's
        convention) and ``response_mask [b,T]``.
    """
    from verl.protocol import DataProto
    from verl.utils.model import compute_position_id_with_mask

    b, T = responses.shape
    if len(teacher_prompt_ids) != b or response_lengths.shape != (b,) or response_mask.shape != (b, T):
        raise ValueError(
            f"{len(teacher_prompt_ids)} teacher prompts, response_lengths {tuple(response_lengths.shape)} and "
            f"response_mask {tuple(response_mask.shape)} for responses {tuple(responses.shape)}: one of each per row"
        )
    if any(len(p) == 0 for p in teacher_prompt_ids):
        raise ValueError("every teacher prompt needs at least one token")
    P = max(len(p) for p in teacher_prompt_ids)
    prompts = torch.full((b, P), int(pad_token_id), dtype=torch.long)
    prompt_attn = torch.zeros((b, P), dtype=torch.long)
    for i, p in enumerate(teacher_prompt_ids):
        prompts[i, P - len(p):] = torch.tensor(list(p), dtype=torch.long)
        prompt_attn[i, P - len(p):] = 1
    resp_attn = (torch.arange(T) < response_lengths.long().unsqueeze(-1)).long()
    resp = torch.where(resp_attn.bool(), responses.long(), torch.full_like(responses.long(), int(pad_token_id)))
    attn = torch.cat([prompt_attn, resp_attn], dim=1)
    return DataProto.from_dict({
        "prompts": prompts,
        "responses": resp,
        "input_ids": torch.cat([prompts, resp], dim=1),
        "attention_mask": attn,
        "position_ids": compute_position_id_with_mask(attn),
        "response_mask": (response_mask.bool() & resp_attn.bool()).long(),
    })


def worker_dp_size(worker_group, mesh: str) -> int:
    """Data-parallel size of ``worker_group`` for ``mesh`` (verl's own dispatch query)."""
    info = worker_group._dispatch_info
    if mesh not in info:
        info[mesh] = worker_group._query_dispatch_info(mesh)
    return max(info[mesh]) + 1


@dataclass
class TeacherCall:
    """Which worker group scores the teacher batch, and how.

    Attributes:
        worker_group: a verl ``RayWorkerGroup`` (or anything with the same log-prob method).
        method: ``compute_ref_log_prob`` (reference worker) or ``compute_log_prob`` (actor).
        mesh: the dispatch mesh of that method (``ref`` or ``actor``).
        no_lora_adapter: score with the LoRA adapter disabled (the reference inside the actor).
        micro_batch_size: rows per micro-batch when the worker splits by a fixed size (no dynamic
            batch size): verl's engine then needs each rank's rows to be a multiple of it.
    """

    worker_group: Any
    method: str
    mesh: str
    no_lora_adapter: bool = False
    micro_batch_size: int = 1


def worker_response_logprobs(call: TeacherCall, batch, *, temperature: float) -> torch.Tensor:
    """Log-probs ``[b,T]`` of ``batch``'s response tokens from the worker (0 where ``response_mask = 0``).

    Follows verl's own path for padded batches (``ray_trainer._compute_ref_log_prob``):
    ``to_tensordict`` -> ``left_right_2_no_padding`` -> the worker's log-prob method ->
    ``no_padding_2_padding``. Rows are repeated at the end up to a multiple of the worker's
    data-parallel size times ``call.micro_batch_size`` (verl's dispatch splits evenly, its engine
    splits each rank's rows into whole micro-batches) and dropped afterwards; with ``dp > 1`` they
    are reordered so that each rank gets a similar token workload (verl's ``_balance_batch``
    partitioner) and put back in order afterwards.
    """
    from verl.protocol import DataProto
    from verl.utils import tensordict_utils as tu
    from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    b = len(batch)
    dp = worker_dp_size(call.worker_group, call.mesh)
    extra = (-b) % (dp * max(1, int(call.micro_batch_size)))
    if extra:
        batch = DataProto.concat([batch, batch[[b - 1] * extra]])
    order = list(range(len(batch)))
    if dp > 1:  # contiguous chunks go to the ranks: balance them as verl balances the training batch
        seqlens = batch.batch["attention_mask"].sum(-1)
        parts = get_seqlen_balanced_partitions(calculate_workload(seqlens), k_partitions=dp, equal_size=True)
        order = [j for part in parts for j in part]
        batch = batch[order]
    td = left_right_2_no_padding(batch.to_tensordict())
    meta = {"calculate_entropy": False, "compute_loss": False, "temperature": float(temperature)}
    if call.no_lora_adapter:
        meta["no_lora_adapter"] = True
    tu.assign_non_tensor(td, **meta)
    out = getattr(call.worker_group, call.method)(td)
    sent = no_padding_2_padding(tu.get(out, "log_probs"), td).float()
    sent = torch.where(batch.batch["response_mask"].bool(), sent, torch.zeros_like(sent))
    logp = torch.empty_like(sent)
    logp[torch.tensor(order, dtype=torch.long)] = sent  # row order[k] was sent as row k
    return logp[:b]


# ---------------------------------------------------------------------------------------------
# the credit step


@dataclass
class CreditOutput:
    """One step of the extension.

    Attributes:
        advantages: ``[B,T]`` reweighted advantages (verl's dtype), 0 where masked.
        teacher_logp: ``[B,T]`` teacher log-probs (0 on rows not scored).
        scored: ``[B]`` bool, the rows sent to the teacher (advantage not 0).
        metrics: plain floats, keys ``credit/...``.
    """

    advantages: torch.Tensor
    teacher_logp: torch.Tensor
    scored: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


class CreditExtension:
    """Holds the credit config and the prompt encoder; turns verl's advantages into credit advantages.

    Args:
        cfg: the validated :class:`VerlCreditConfig`.
        tokenizer: the policy's tokenizer.
        encode: teacher chat -> token ids (default: :class:`TeacherPromptEncoder` of ``tokenizer``).
    """

    def __init__(self, cfg: VerlCreditConfig, tokenizer, *, encode: Callable[[list[dict]], list[int]] | None = None):
        self.cfg = cfg.validate()
        self.tokenizer = tokenizer
        self.encode = encode if encode is not None else TeacherPromptEncoder(tokenizer)
        if not self.cfg.enabled:
            raise ValueError(f"{CONFIG_KEY}.name=grpo is no credit: nothing for the extension to do")
        self._tokens: CreditTokens | None = None

    def tokens(self) -> CreditTokens:
        """The GEAR boundary and ``span_end`` tokens of the vocabulary (found at the first step)."""
        if self._tokens is None:
            c = self.cfg  # GEAR's segment ends only for GEAR: the vocabulary scan costs seconds on a large one
            self._tokens = CreditTokens(self.tokenizer, boundaries=c.segment_boundaries, span_end=c.span_end)
        return self._tokens

    def teacher_prompts(self, raw_prompts: Sequence, extra_infos: Sequence, rows: Sequence[int]) -> list[list[int]]:
        """Token ids of the teacher prompt of each of ``rows``.

        A group's ``n`` samples share one prompt: each distinct teacher chat is tokenised once.
        """
        c = self.cfg
        out, seen = [], {}
        for i in rows:
            priv = privileged_text(extra_infos[i], c.privileged_key, row=int(i))
            item = SimpleNamespace(privileged=priv, reference=priv)
            try:
                messages = teacher_messages(list(raw_prompts[i]), item, placement=c.privileged_placement,
                                            template=c.chat_template, system_template=c.system_template)
            except ValueError as e:
                raise ValueError(f"grpolab credit in verl, row {int(i)}: {e}") from None
            key = repr(messages)
            if key not in seen:
                seen[key] = self.encode(messages)
            out.append(seen[key])
        return out

    def __call__(
        self,
        *,
        step: int,
        advantages: torch.Tensor,
        old_log_probs: torch.Tensor,
        responses: torch.Tensor,
        response_lengths: torch.Tensor,
        response_mask: torch.Tensor,
        raw_prompts: Sequence,
        extra_infos: Sequence,
        teacher: TeacherCall,
        temperature: float,
    ) -> CreditOutput:
        """One step. Tensors ``[B,T]`` (``response_lengths [B]``), right-padded as verl pads them.

        Args:
            step: 0-based training step (verl's ``global_steps - 1``): drives ``lam``.
            advantages: verl's token-level advantages.
            old_log_probs: the student's log-probs of the sampled tokens.
            responses, response_lengths, response_mask: the sampled responses.
            raw_prompts, extra_infos: per row, verl's ``raw_prompt`` (chat messages) and ``extra_info``.
            teacher: the worker group call (:meth:`teacher_call` of the trainer).
            temperature: the rollout temperature (the student's log-probs used it too).
        """
        c = self.cfg
        B, T = response_mask.shape
        mask = response_mask.bool()
        adv = advantages
        scored = (torch.where(mask, adv, torch.zeros_like(adv)) != 0).any(-1)
        rows = scored.nonzero().squeeze(-1).tolist()
        lam = c.lam_at(step)
        teacher_lp = torch.zeros(B, T, dtype=torch.float32)
        if rows:
            prompts = self.teacher_prompts(raw_prompts, extra_infos, rows)
            idx = torch.tensor(rows, dtype=torch.long)
            batch = build_teacher_batch(prompts, responses[idx], response_lengths[idx], response_mask[idx],
                                        pad_token_id=self._pad_id())
            teacher_lp[idx] = worker_response_logprobs(teacher, batch, temperature=temperature)
        student_lp = torch.where(mask, old_log_probs.float(), torch.zeros_like(teacher_lp))
        boundary, span = self.tokens().masks(responses, mask)
        res = obj.credit_advantages(c.name, adv, student_lp, teacher_lp, mask, lam=lam, boundary_mask=boundary,
                                    span_mask=span, **c.method_kwargs())
        new_adv = torch.where(scored.unsqueeze(-1), res.advantages.to(adv.dtype), adv)
        return CreditOutput(advantages=new_adv, teacher_logp=teacher_lp, scored=scored,
                            metrics=credit_step_metrics(res, lam, student_lp, teacher_lp, mask, scored))

    def _pad_id(self) -> int:
        pad = getattr(self.tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(self.tokenizer, "eos_token_id", None)
        return 0 if pad is None else int(pad)


# ---------------------------------------------------------------------------------------------
# the trainer extension


def _as_list(values) -> list:
    """verl's non-tensor TransferQueue fields (LinkedList, NonTensorStack, ndarray) -> a plain list."""
    out = []
    for v in list(values):
        out.append(v.data if hasattr(v, "data") and not isinstance(v, (torch.Tensor, dict, list)) else v)
    return out


class CreditTrainerMixin:
    """Mixed into a verl ``PPOTrainer`` subclass by :func:`credit_trainer_class` (verl 0.9.x).

    Overrides, each calling verl's own implementation first:

    - ``__init__``: with ``teacher=frozen`` the trainer needs a reference worker even without a KL;
    - ``_init_resource_pool_mgr``: adds that reference worker (``actor_rollout`` becomes
      ``actor_rollout_ref``; with LoRA the reference is the actor without its adapter);
    - ``_compute_ref_log_prob``: skipped when no KL uses it (the worker is only the teacher);
    - ``_init_dataloader``: checks every training row's privileged text (before any worker starts);
    - ``_init_tokenizer``: builds the :class:`CreditExtension` with verl's chat-template builder;
    - ``_compute_advantage``: the credit step (module docstring).
    """

    grpolab_credit: VerlCreditConfig  # set by credit_trainer_class

    def __init__(self, config):
        super().__init__(config)
        self.grpolab_kl_uses_ref = bool(self.use_reference_policy)
        if self.grpolab_credit.teacher == "frozen":  # the reference worker is the frozen teacher
            self.use_reference_policy = True

    def _init_resource_pool_mgr(self):
        super()._init_resource_pool_mgr()
        ensure_reference_worker(self)

    def _compute_ref_log_prob(self, batch, metrics):
        if not self.grpolab_kl_uses_ref:
            return batch
        return super()._compute_ref_log_prob(batch, metrics)

    def _init_dataloader(self):
        super()._init_dataloader()
        check_dataset_privileged(self.train_dataset, self.grpolab_credit.privileged_key)

    def _init_tokenizer(self):
        super()._init_tokenizer()
        from verl.utils.config import omega_conf_to_dataclass

        model_type = None
        try:
            hf = omega_conf_to_dataclass(self.config.actor_rollout_ref.model).hf_config
            model_type = getattr(hf, "model_type", None)
        except Exception as e:  # the builder then uses verl's default: warn, do not hide it
            warnings.warn(f"grpolab credit: could not read the model type ({e}); verl's default chat-token "
                          "builder renders the teacher prompts", stacklevel=2)
        kwargs = self.config.data.get("apply_chat_template_kwargs", None) or {}
        encode = TeacherPromptEncoder(self.tokenizer, chat_template_kwargs=dict(kwargs),
                                      hf_model_type=model_type if isinstance(model_type, str) else None)
        self.grpolab_extension = CreditExtension(self.grpolab_credit, self.tokenizer, encode=encode)

    def grpolab_teacher_call(self) -> TeacherCall:
        """The reference worker (``teacher=frozen``: the initial policy) or the actor (``live``)."""
        def micro(section: str) -> int:  # verl's fixed micro-batch size of that log-prob call, else 1
            cfg = self.config.actor_rollout_ref[section]
            if cfg.get("log_prob_use_dynamic_bsz", False):
                return 1
            return int(cfg.get("log_prob_micro_batch_size_per_gpu", None) or 1)

        if self.grpolab_credit.teacher == "live":
            return TeacherCall(self.actor_rollout_wg, "compute_log_prob", "actor", micro_batch_size=micro("rollout"))
        if self.ref_in_actor:
            return TeacherCall(self.actor_rollout_wg, "compute_log_prob", "actor", no_lora_adapter=True,
                               micro_batch_size=micro("ref"))
        return TeacherCall(self.ref_policy_wg, "compute_ref_log_prob", "ref", micro_batch_size=micro("ref"))

    def _compute_advantage(self, batch, metrics):
        batch = super()._compute_advantage(batch, metrics)
        import transfer_queue as tq
        from tensordict import TensorDict
        from verl.utils.debug import marked_timer
        from verl.workers.utils.padding import response_to_nested

        timing = getattr(self, "timing_raw", None)
        timing = {} if timing is None else timing
        with marked_timer("grpolab_teacher", timing, color="purple"):
            fields = ["responses", "response_mask", "old_log_probs", "advantages", "raw_prompt", "extra_info"]
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
            mask_nested = data["response_mask"]
            lengths = data["responses"].offsets().diff().long()
            out = self.grpolab_extension(
                step=int(self.global_steps) - 1,
                advantages=data["advantages"].to_padded_tensor(0.0),
                old_log_probs=data["old_log_probs"].to_padded_tensor(0.0),
                responses=data["responses"].to_padded_tensor(0),
                response_lengths=lengths,
                response_mask=mask_nested.to_padded_tensor(0),
                raw_prompts=_as_list(data["raw_prompt"]),
                extra_infos=_as_list(data["extra_info"]),
                teacher=self.grpolab_teacher_call(),
                temperature=float(self.config.actor_rollout_ref.rollout.temperature),
            )
            nested = TensorDict({"advantages": response_to_nested(out.advantages, mask_nested)}, batch_size=len(batch))
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=nested)
        metrics.update(out.metrics)
        return batch


def check_dataset_privileged(dataset, key: str) -> int:
    """Check ``extra_info[key]`` of every row of verl's training dataset; return the rows checked.

    Reads the dataset's table (``RLHFDataset.dataframe``, a Hugging Face ``datasets.Dataset``)
    without tokenising; a dataset without one is not checked (0): its first step fails instead.
    """
    frame = getattr(dataset, "dataframe", None)
    if frame is None or "extra_info" not in getattr(frame, "column_names", ()):
        if frame is not None:
            raise KeyError(f"the training data has no extra_info column; grpolab credit reads the privileged "
                           f"text from extra_info[{key!r}] of every row")
        return 0
    infos = frame["extra_info"]
    for i, info in enumerate(infos):
        privileged_text(info, key, row=i)
    return len(infos)


def ensure_reference_worker(trainer) -> None:
    """With ``teacher=frozen``, give the trainer a reference worker if verl's role mapping has none."""
    from verl.trainer.ppo.utils import Role

    if trainer.grpolab_credit.teacher != "frozen":
        return
    model = trainer.config.actor_rollout_ref.model
    lora_rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)
    if lora_rank > 0 or model.get("lora_adapter_path") is not None:
        return  # the reference is the actor with its adapter disabled
    roles, pools = trainer.role_worker_mapping, trainer.mapping
    if Role.ActorRolloutRef in roles or Role.RefPolicy in roles:
        return
    if Role.ActorRollout in roles:
        roles[Role.ActorRolloutRef] = roles.pop(Role.ActorRollout)
        pools[Role.ActorRolloutRef] = pools.pop(Role.ActorRollout)
    elif Role.Actor in roles:
        roles[Role.RefPolicy] = roles[Role.Actor]
        pools[Role.RefPolicy] = pools[Role.Actor]
    else:
        raise RuntimeError(f"grpolab credit: no actor role in verl's worker mapping {sorted(map(str, roles))}")


def credit_trainer_class(base: type, cfg: VerlCreditConfig) -> type:
    """``base`` (a verl v1 ``PPOTrainer`` subclass) with the credit step, configured by ``cfg``."""
    from verl.trainer.ppo.v1 import PPOTrainer

    if not (isinstance(base, type) and issubclass(base, PPOTrainer)):
        raise TypeError(f"credit_trainer_class needs a verl.trainer.ppo.v1.PPOTrainer subclass, got {base!r}")
    return type(f"GrpolabCredit{base.__name__}", (CreditTrainerMixin, base),
                {"grpolab_credit": cfg.validate(), "__module__": __name__})


__all__ = [
    "CONFIG_KEY",
    "DEFAULT_TEMPLATE",
    "VERL_SPEC",
    "CreditExtension",
    "CreditOutput",
    "CreditTrainerMixin",
    "TeacherCall",
    "TeacherPromptEncoder",
    "VerlCreditConfig",
    "VerlVersionError",
    "build_teacher_batch",
    "check_dataset_privileged",
    "check_verl_version",
    "credit_trainer_class",
    "ensure_reference_worker",
    "privileged_text",
    "worker_response_logprobs",
]
