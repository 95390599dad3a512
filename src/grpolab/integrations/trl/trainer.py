"""grpolab's objective inside TRL's ``GRPOTrainer`` (tested with trl 1.16).

TRL keeps everything it is good at -- generation (transformers or vLLM), rewards, advantages,
Accelerate / DeepSpeed / FSDP, logging -- and grpolab replaces the loss:

- aggregation ``token | sequence | constant | balanced`` (BA, arXiv 2605.04077) as weights
  ``W[B,T]`` computed once per *generation batch* from the gathered lengths, advantage signs and
  prompt groups of all processes, so the loss is exact across gradient accumulation and data
  parallelism (each micro-step's loss is ``sum W l`` scaled by ``num_processes *
  steps_per_generation / gradient_accumulation_steps`` to undo the averaging of gradients over
  processes and to give every optimizer step the weight of a whole batch);
- ratio level ``token | sequence | gspo | cumulative`` (CTPO, arXiv 2605.07331) with TRL's
  ``epsilon`` / ``epsilon_high`` as the clip (for ``cumulative``, CTPO's log-space bounds: set
  ``epsilon=0.025, epsilon_high=0.05``) and grpolab's ``dual_clip`` / ``clip_power``;
- credit ``rlsd | gear`` (docs/methods.md, token-level credit): a no-grad teacher forward of the policy (a
  frozen copy, the live policy, or a given teacher model) on a privileged prompt -- the dataset's
  prompt plus the column ``grpolab_privileged_column`` through ``grpolab_credit_template`` --
  scores the sampled tokens; :func:`grpolab.objectives.credit_advantages` turns TRL's sequence
  advantages into per-token ones. The credit settings are grpolab's one schema
  (:class:`grpolab.config.CreditConfig`, docs/credit.md): its field ``X`` is the argument
  ``grpolab_credit_X`` here, with the same default.

Usage::

    from grpolab.integrations.trl.trainer import GrpolabGRPOConfig, GrpolabGRPOTrainer
    args = GrpolabGRPOConfig(output_dir="out", grpolab_aggregation="balanced",
                             grpolab_ratio="cumulative", epsilon=0.025, epsilon_high=0.05,
                             grpolab_credit_name="rlsd", grpolab_privileged_column="solution")
    trainer = GrpolabGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=ds)

Conversational datasets (TRL's ``prompt`` as a list of ``{role, content}`` messages) work with
credit: the teacher's privileged prompt is built at the message level
(:func:`grpolab.teacher_text.teacher_messages`; ``grpolab_credit_privileged_placement`` ``user``:
the last user turn becomes ``grpolab_credit_chat_template``; ``system``:
``grpolab_credit_system_template`` joins the system message) and rendered by TRL's own chat-template call (same ``chat_template``
and ``chat_template_kwargs``), so the completion tokens follow both prompts identically.
Unsupported inputs (no privileged column, multimodal content parts) are refused when the trainer
is built, before the model loads or generates.

LoRA: pass TRL's ``peft_config=peft.LoraConfig(...)``; the teacher forward runs on the adapted
model (``grpolab_credit_teacher=frozen``: a copy with its adapters, re-synced every
``grpolab_credit_teacher_sync_every`` steps; ``live``: the policy). grpolab's own trainer differs
here: its frozen LoRA teacher is the base model with the adapters switched off.

Metrics: TRL's own keys stay (``clip_ratio/low_mean``, ``clip_ratio/high_mean``,
``clip_ratio/region_mean``, ``entropy``, ``kl``) with grpolab's definitions of the same
quantities (token fractions over the completion mask), next to grpolab's ``grpolab/*`` keys.
TRL's per-sequence extremes ``clip_ratio/low_min`` / ``clip_ratio/high_max`` are not computed.

What TRL's own loss options mean here: ``loss_type`` and ``importance_sampling_level`` are
replaced by ``grpolab_aggregation`` / ``grpolab_ratio`` (other values than TRL's defaults are
refused, to avoid two settings that disagree); ``beta`` is the KL coefficient (k3, aggregated with
``W``); vLLM's importance-sampling correction multiplies ``W``. Not supported (refused at config
time): ``top_entropy_quantile < 1``, ``off_policy_mask_threshold``, ``delta``, and the
``cispo | sapo | vespo | luspo`` losses.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import torch

from grpolab.config import CreditConfig
from grpolab.config_help import KEY_HELP
from grpolab.objectives import (
    aggregation_weights,
    check_objective,
    credit_advantages,
    policy_loss,
)

try:
    from trl import GRPOConfig, GRPOTrainer
except ImportError as e:  # pragma: no cover - exercised only without trl
    raise ImportError("grpolab.integrations.trl.trainer needs trl: pip install 'grpolab[trl]'") from e

from grpolab.rollout.teacher import credit_logprobs, encode_teacher_prompts
from grpolab.teacher_text import CreditTokens, teacher_messages

#: The credit settings are grpolab's one schema (:class:`grpolab.config.CreditConfig`): field
#: ``X`` of it is this adapter's argument ``grpolab_credit_X``, with the same default.
CREDIT_PREFIX = "grpolab_credit_"
#: Credit methods this adapter runs (``opsd`` is grpolab's own trainer's only).
CREDITS = ("grpo", "rlsd", "gear")
_TRL_LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo")
_CREDIT_DEFAULTS = CreditConfig()


def _credit_field(name: str):
    """A ``grpolab_credit_<name>`` argument: the default and help of :class:`CreditConfig`'s field."""
    return field(default=getattr(_CREDIT_DEFAULTS, name), metadata={"help": KEY_HELP[f"credit.{name}"][1]})


@dataclass
class GrpolabGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus grpolab's objective fields (all prefixed ``grpolab_``).

    The credit arguments are ``grpolab_credit_<field>`` for every field of grpolab's credit schema
    (:class:`grpolab.config.CreditConfig`, docs/credit.md); after ``__post_init__`` the validated
    settings are :attr:`grpolab_credit_settings`.
    """

    grpolab_aggregation: str = field(default="token", metadata={"help": "token | sequence | constant | balanced"})
    grpolab_ratio: str = field(default="token", metadata={"help": "token | sequence | gspo | cumulative"})
    grpolab_dual_clip: float | None = field(default=3.0, metadata={"help": "dual clip for A < 0 (None: off)"})
    grpolab_clip_power: float = field(default=0.5, metadata={"help": "CTPO's p in s_t = pos_t ** p"})
    grpolab_privileged_column: str = field(
        default="reference", metadata={"help": "dataset column with the privileged text (e.g. the solution)"})
    # grpolab's credit schema, field for field (tests/integrations/test_credit_settings.py checks the set)
    grpolab_credit_name: str = _credit_field("name")
    grpolab_credit_lam: float = _credit_field("lam")
    grpolab_credit_lam_end: float = _credit_field("lam_end")
    grpolab_credit_lam_steps: int = _credit_field("lam_steps")
    grpolab_credit_lam_schedule: str = _credit_field("lam_schedule")
    grpolab_credit_eps_w: float = _credit_field("eps_w")
    grpolab_credit_negative_only: bool = _credit_field("negative_only")
    grpolab_credit_span_end: str = _credit_field("span_end")
    grpolab_credit_teacher: str = _credit_field("teacher")
    grpolab_credit_teacher_sync_every: int = _credit_field("teacher_sync_every")
    grpolab_credit_template: str = _credit_field("template")
    grpolab_credit_privileged_placement: str = _credit_field("privileged_placement")
    grpolab_credit_chat_template: str = _credit_field("chat_template")
    grpolab_credit_system_template: str = _credit_field("system_template")
    grpolab_credit_divergence: str = _credit_field("divergence")
    grpolab_credit_gear_threshold: str = _credit_field("gear_threshold")
    grpolab_credit_gear_k: float = _credit_field("gear_k")
    grpolab_credit_gear_quantile: float = _credit_field("gear_quantile")
    grpolab_credit_gear_min_divergence: float = _credit_field("gear_min_divergence")
    grpolab_credit_gear_anchor: str = _credit_field("gear_anchor")
    grpolab_credit_gear_min_drop: float = _credit_field("gear_min_drop")
    grpolab_credit_gear_boundaries: str = _credit_field("gear_boundaries")
    grpolab_credit_chunk_size: int = _credit_field("chunk_size")
    grpolab_credit_micro_batch_size: int = _credit_field("micro_batch_size")

    def __post_init__(self):
        super().__post_init__()
        if self.loss_type not in _TRL_LOSS_TYPES:
            raise ValueError(
                f"loss_type={self.loss_type!r} is a TRL loss that grpolab does not replace; GrpolabGRPOTrainer "
                f"uses grpolab_aggregation instead (leave loss_type at one of {_TRL_LOSS_TYPES}) or use TRL's "
                "own GRPOTrainer"
            )
        if self.importance_sampling_level != "token":
            raise ValueError("set grpolab_ratio ('sequence' / 'gspo' / 'cumulative') instead of "
                             f"importance_sampling_level={self.importance_sampling_level!r}")
        for name, bad in (("top_entropy_quantile", self.top_entropy_quantile < 1.0),
                          ("off_policy_mask_threshold", self.off_policy_mask_threshold is not None),
                          ("delta", self.delta is not None)):
            if bad:
                raise ValueError(f"{name} is not supported by GrpolabGRPOTrainer; leave it at TRL's default")
        check_objective(
            ratio=self.grpolab_ratio, aggregation=self.grpolab_aggregation, clip_low=self.epsilon,
            clip_high=self.epsilon if self.epsilon_high is None else self.epsilon_high,
            dual_clip=self.grpolab_dual_clip, clip_power=self.grpolab_clip_power,
            max_len=self.max_completion_length, kl_coef=self.beta, kl_estimator="k3",
        )
        names = [f.name for f in dataclasses.fields(CreditConfig)]
        c = CreditConfig.from_mapping({k: getattr(self, CREDIT_PREFIX + k) for k in names}, prefix=CREDIT_PREFIX)
        if c.name not in CREDITS:
            raise ValueError(f"{CREDIT_PREFIX}name={c.name!r} is grpolab's own trainer's only; the TRL adapter "
                             f"runs {', '.join(CREDITS)}")
        #: the validated credit settings (:class:`grpolab.config.CreditConfig`)
        self.grpolab_credit_settings = c


def _is_conversation(prompt) -> bool:
    return isinstance(prompt, (list, tuple)) and bool(prompt) and isinstance(prompt[0], dict)


def check_credit_dataset(dataset, args: GrpolabGRPOConfig, *, rows: int = 8) -> None:
    """Refuse a dataset that ``grpolab_credit`` cannot use, naming the fix (checks the first ``rows`` rows).

    Raises:
        ValueError: the privileged column is missing; a prompt is neither text nor a conversation of
            ``{role, content}`` messages with string content (multimodal parts are not supported).
    """
    if dataset is None:
        return
    if isinstance(dataset, dict):  # a dict of datasets: check each
        for d in dataset.values():
            check_credit_dataset(d, args, rows=rows)
        return
    col = args.grpolab_privileged_column
    names = getattr(dataset, "column_names", None)
    if names is not None and col not in names:
        raise ValueError(f"grpolab_credit_name={args.grpolab_credit_name!r} needs the dataset column {col!r} "
                         f"(grpolab_privileged_column) with the privileged text; the dataset has {names}")
    try:
        n = min(rows, len(dataset))
    except TypeError:  # an iterable dataset: nothing to peek at without consuming it
        return
    for i in range(n):
        prompt = dataset[i]["prompt"]
        if isinstance(prompt, str):
            continue
        if not _is_conversation(prompt):
            raise ValueError(f"grpolab credit: row {i} 'prompt' is a {type(prompt).__name__}; use text or a "
                             "conversation (a list of {'role', 'content'} messages)")
        for m in prompt:
            if not isinstance(m.get("content"), str):
                raise ValueError(f"grpolab credit: row {i} has a message whose content is not a string "
                                 "(multimodal content parts are not supported by the teacher forward); use text "
                                 "messages or grpolab_credit_name='grpo'")


def row_weights(lengths: torch.Tensor, advantages: torch.Tensor, group_ids: torch.Tensor, aggregation: str,
                *, max_len: int | None = None) -> torch.Tensor:
    """Per-row aggregation weight ``w[N]`` with ``W[i,t] = mask[i,t] * w[i]`` for every grpolab mode.

    Args:
        lengths: ``[N]`` valid-token count of each completion (the whole generation batch).
        advantages: ``[N]`` sequence advantages (only the signs matter, for ``balanced``).
        group_ids: ``[N]`` prompt group of each row.
        aggregation: ``token | sequence | constant | balanced``.
        max_len: ``L`` for ``constant``.
    """
    T = int(lengths.max().item()) if lengths.numel() else 0
    mask = (torch.arange(max(T, 1), device=lengths.device) < lengths[:, None]).float()
    W = aggregation_weights(mask, aggregation, advantages=advantages.float(), group_ids=group_ids, max_len=max_len)
    return W.amax(-1)  # constant along each row's valid tokens, 0 for an empty row


class GrpolabGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose loss is grpolab's :func:`~grpolab.objectives.policy_loss`.

    Args:
        *args, **kwargs: as for ``GRPOTrainer``; ``args`` must be a :class:`GrpolabGRPOConfig`.
        teacher_model: optional teacher for the credit step, used as given (no re-sync); default:
            the policy shown the privileged prompt (``grpolab_credit_teacher``: ``frozen``, a copy
            re-synced every ``grpolab_credit_teacher_sync_every`` steps, 0 = never; ``live``).
    """

    def __init__(self, *args, teacher_model: torch.nn.Module | None = None, **kwargs):
        cfg = kwargs.get("args", args[2] if len(args) > 2 else None)
        if not isinstance(cfg, GrpolabGRPOConfig):
            raise TypeError("GrpolabGRPOTrainer needs args=GrpolabGRPOConfig(...) (TRL's GRPOConfig plus grpolab_*)")
        if cfg.grpolab_credit_settings.enabled:  # refuse now, not after the model has loaded and generated
            check_credit_dataset(kwargs.get("train_dataset", args[3] if len(args) > 3 else None), cfg)
        super().__init__(*args, **kwargs)
        self._teacher_model = teacher_model
        self._teacher_copy: torch.nn.Module | None = None
        self._teacher_synced_at = -1
        self._credit_tokens: CreditTokens | None = None

    def _send_telemetry(self):
        """TRL's trainer reports its use to the Hugging Face Hub from a background thread at
        construction (``huggingface_hub.send_telemetry``); grpolab sends nothing off the machine."""

    # ------------------------------------------------------------------ generation batch
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
        adv_B = out["advantages"]
        if self.args.grpolab_credit_settings.enabled and mode == "train":
            out["advantages"] = self._credit(inputs, out, mask, adv_B, mode)
        # aggregation weights over the *global* generation batch (rows of a group may sit on other processes)
        lengths_all = self.accelerator.gather(mask.sum(-1).float())
        adv_all = self.accelerator.gather(adv_B.float())
        gids_all = torch.arange(lengths_all.numel(), device=lengths_all.device) // self.num_generations
        w_all = row_weights(lengths_all, adv_all, gids_all, self.args.grpolab_aggregation,
                            max_len=self.max_completion_length)
        n = adv_B.shape[0]
        w = w_all[self.accelerator.process_index * n:(self.accelerator.process_index + 1) * n]
        scale = float(self.accelerator.num_processes)
        if mode == "train":
            scale *= self.args.steps_per_generation / self.args.gradient_accumulation_steps
        out["grpolab_row_weight"] = w * scale
        return out

    def _policy(self) -> torch.nn.Module:
        """The policy as a plain HF model: a ``peft.PeftModel`` (TRL's ``peft_config``) is unwrapped to
        its model with the adapter layers injected, whose ``forward`` keeps transformers' signature."""
        policy = self.accelerator.unwrap_model(self.model)
        return policy.get_base_model() if hasattr(policy, "get_base_model") else policy

    def _teacher(self) -> torch.nn.Module:
        if self._teacher_model is not None:
            return self._teacher_model
        policy = self._policy()
        c = self.args.grpolab_credit_settings
        if c.teacher == "live":
            return policy
        step, every = self.state.global_step, c.teacher_sync_every  # every = 0: never re-synced
        due = every > 0 and step % every == 0 and step != self._teacher_synced_at
        if self._teacher_copy is None or due:
            self._teacher_copy = copy.deepcopy(policy).eval().requires_grad_(False)
            self._teacher_synced_at = step
        return self._teacher_copy

    def teacher_prompt_ids(self, inputs, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded privileged teacher prompts ``([B, P'], [B, P'])``, one per input row.

        Text prompts: ``grpolab_credit_template`` around the prompt. Conversations: the privileged
        context joins the conversation (:func:`~grpolab.teacher_text.teacher_messages`), rendered
        with TRL's chat-template call and the generation prompt, like the student's prompt.
        """
        from types import SimpleNamespace

        from grpolab.rollout import left_pad

        a, c = self.args, self.args.grpolab_credit_settings
        col = a.grpolab_privileged_column
        for x in inputs:
            if col not in x:
                raise KeyError(f"grpolab_credit_name={c.name!r} needs the dataset column {col!r} "
                               f"(grpolab_privileged_column); the row has {sorted(x)}")
        if not _is_conversation(inputs[0]["prompt"]):
            texts = [c.template.format(prompt=x["prompt"], privileged=x[col], reference=x[col])
                     for x in inputs]
            return encode_teacher_prompts(self.processing_class, texts, group_size=1, device=device)
        convs = []
        for x in inputs:
            item = SimpleNamespace(privileged=str(x[col]), reference=str(x[col]))
            convs.append(teacher_messages(x["prompt"], item, placement=c.privileged_placement,
                                          template=c.chat_template, system_template=c.system_template))
        tok = self.processing_class
        rows = [list(tok.apply_chat_template(conversation=c, tools=self.tools or None, chat_template=self.chat_template,
                                             add_generation_prompt=True, tokenize=True, return_dict=True,
                                             **self.chat_template_kwargs)["input_ids"]) for c in convs]
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        return left_pad(rows, pad, device=device)

    @torch.no_grad()
    def _credit(self, inputs, out, mask, adv_B, mode):
        c = self.args.grpolab_credit_settings
        device = out["completion_ids"].device
        t_ids, t_mask = self.teacher_prompt_ids(inputs, device)
        policy = self._policy()
        rollout = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask, out["completion_mask"])
        res = credit_logprobs(self._teacher(), policy, t_ids, t_mask, rollout, temperature=self.temperature,
                              return_kl=c.needs_kl(), chunk_size=c.chunk_size,
                              micro_batch_size=c.micro_batch_size or None)  # the trainer's glue (grpolab.rollout.teacher)
        if self._credit_tokens is None:
            self._credit_tokens = CreditTokens(self.processing_class, span_end=c.span_end,
                                               boundaries=c.segment_boundaries)
        boundary, span = self._credit_tokens.masks(out["completion_ids"], mask)
        lam = c.lam_at(self.state.global_step)
        res_c = credit_advantages(c.name, adv_B, res.student_logp.detach(), res.logp, mask, lam=lam,
                                  divergence=res.kl if c.needs_kl() else None, boundary_mask=boundary,
                                  span_mask=span, **c.method_kwargs())
        self._metrics[mode]["grpolab/credit/lam"].append(lam)
        for k, v in res_c.metrics.items():
            self._metrics[mode][f"grpolab/credit/{k}"].append(float(v))
        return res_c.advantages.to(adv_B.dtype)

    # ------------------------------------------------------------------ loss
    def grpolab_loss(self, per_token_logps, inputs, mask):
        """grpolab's loss of one micro-batch: ``[B,T]`` log-probs (with grad) -> ``(loss, metrics)``."""
        a = self.args
        old = inputs.get("old_per_token_logps")
        old = per_token_logps.detach() if old is None else old
        W = mask.to(per_token_logps.dtype) * inputs["grpolab_row_weight"].to(per_token_logps.dtype)[:, None]
        if self.use_vllm and self.vllm_importance_sampling_correction:
            W = W * inputs["importance_sampling_ratio"].to(W.dtype)
        return policy_loss(
            per_token_logps, old, inputs["advantages"], mask,
            ratio=a.grpolab_ratio, weights=W, clip_low=self.epsilon_low, clip_high=self.epsilon_high,
            dual_clip=a.grpolab_dual_clip, clip_power=a.grpolab_clip_power,
            ref_logp=inputs.get("ref_per_token_logps") if self.beta != 0.0 else None,
            kl_coef=self.beta, kl_estimator="k3",
        )

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if inputs.get("tool_mask") is None else completion_mask * inputs["tool_mask"]
        per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
        )
        loss, m = self.grpolab_loss(per_token_logps, inputs, mask)
        mode = "train" if self.model.training else "eval"
        valid = mask.bool()
        ent = entropies.detach()[valid].mean() if valid.any() else entropies.new_zeros(())
        self._metrics[mode]["entropy"].append(self.accelerator.gather(ent).nanmean().item())
        got = {}
        for k in ("clip_frac_low", "clip_frac_high", "clip_frac_dual", "clip_frac", "approx_kl", "ratio_mean"):
            got[k] = self.accelerator.gather(m[k]).nanmean().item()
            self._metrics[mode][f"grpolab/{k}"].append(got[k])
        # TRL's own keys (dashboards keep working): the same token fractions; low and high are
        # disjoint (A < 0 vs A > 0), so the region fraction is their sum
        self._metrics[mode]["clip_ratio/low_mean"].append(got["clip_frac_low"])
        self._metrics[mode]["clip_ratio/high_mean"].append(got["clip_frac_high"])
        self._metrics[mode]["clip_ratio/region_mean"].append(got["clip_frac_low"] + got["clip_frac_high"])
        if self.beta != 0.0:
            self._metrics[mode]["kl"].append(self.accelerator.gather(m["kl"]).nanmean().item())
        return loss
