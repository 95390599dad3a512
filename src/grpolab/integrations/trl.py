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
- credit ``rlsd | gear`` (docs/methods.md, token-level credit): a no-grad teacher forward of the policy (or a
  given teacher model) on a privileged prompt -- the dataset's prompt plus the column
  ``grpolab_privileged_column`` through ``grpolab_teacher_template`` -- scores the sampled
  tokens; :func:`grpolab.objectives.credit_advantages` turns TRL's sequence advantages into
  per-token ones.

Usage::

    from grpolab.integrations.trl import GrpolabGRPOConfig, GrpolabGRPOTrainer
    args = GrpolabGRPOConfig(output_dir="out", grpolab_aggregation="balanced",
                             grpolab_ratio="cumulative", epsilon=0.025, epsilon_high=0.05,
                             grpolab_credit="rlsd", grpolab_privileged_column="solution")
    trainer = GrpolabGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=ds)

Conversational datasets (TRL's ``prompt`` as a list of ``{role, content}`` messages) work with
credit: the teacher's privileged prompt is built at the message level
(:func:`grpolab.rollout.teacher.teacher_messages`; ``grpolab_privileged_placement`` ``user``: the
last user turn becomes ``grpolab_teacher_chat_template``; ``system``: ``grpolab_teacher_system_template``
joins the system message) and rendered by TRL's own chat-template call (same ``chat_template``
and ``chat_template_kwargs``), so the completion tokens follow both prompts identically.
Unsupported inputs (no privileged column, multimodal content parts) are refused when the trainer
is built, before the model loads or generates.

LoRA: pass TRL's ``peft_config=peft.LoraConfig(...)``; the teacher forward runs on the adapted
model (the live policy, or with ``grpolab_teacher_sync_steps=N`` a copy re-synced every N steps).

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
from dataclasses import dataclass, field

import torch

from grpolab.objectives import (
    aggregation_weights,
    check_credit,
    check_objective,
    credit_advantages,
    lam_schedule,
    policy_loss,
)

try:
    from trl import GRPOConfig, GRPOTrainer
except ImportError as e:  # pragma: no cover - exercised only without trl
    raise ImportError("grpolab.integrations.trl needs trl: pip install 'grpolab[trl]'") from e

from grpolab.rollout.teacher import (
    DEFAULT_CHAT_TEACHER_TEMPLATE,
    DEFAULT_SYSTEM_TEACHER_TEMPLATE,
    DEFAULT_TEACHER_TEMPLATE,
    PLACEMENTS,
    check_template,
    credit_logprobs,
    encode_teacher_prompts,
    teacher_messages,
)

CREDITS = ("grpo", "rlsd", "gear")
#: "No credit" is spelled ``grpo`` as in grpolab's own ``credit.name``; ``none`` (this adapter's
#: earlier spelling) is still accepted and means the same.
_NO_CREDIT = ("grpo", "none")
GEAR_DIVERGENCES = ("kl", "logratio")
_TRL_LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo")
# the teacher's template text (plain, chat user turn, system note): grpolab.utils.teacher_templates


@dataclass
class GrpolabGRPOConfig(GRPOConfig):
    """TRL's ``GRPOConfig`` plus grpolab's objective fields (all prefixed ``grpolab_``)."""

    grpolab_aggregation: str = field(default="token", metadata={"help": "token | sequence | constant | balanced"})
    grpolab_ratio: str = field(default="token", metadata={"help": "token | sequence | gspo | cumulative"})
    grpolab_dual_clip: float | None = field(default=3.0, metadata={"help": "dual clip for A < 0 (None: off)"})
    grpolab_clip_power: float = field(default=0.5, metadata={"help": "CTPO's p in s_t = pos_t ** p"})
    grpolab_credit: str = field(default="grpo", metadata={"help": "grpo (no credit) | rlsd | gear"})
    grpolab_credit_lam: float = field(default=0.5, metadata={"help": "credit mixing weight at step 0"})
    grpolab_credit_lam_end: float = field(default=0.0, metadata={"help": "credit mixing weight after the decay"})
    grpolab_credit_lam_steps: int = field(default=50, metadata={"help": "linear decay steps (0: constant lam)"})
    grpolab_credit_eps_w: float = field(default=0.2, metadata={"help": "credit weight clip [1-eps_w, 1+eps_w]"})
    grpolab_credit_negative_only: bool = field(default=False, metadata={"help": "reweight only A < 0 samples"})
    grpolab_gear_divergence: str = field(default="kl", metadata={"help": "kl (full vocabulary) | logratio"})
    grpolab_privileged_column: str = field(
        default="reference", metadata={"help": "dataset column with the privileged text (e.g. the solution)"})
    grpolab_teacher_template: str = field(
        default=DEFAULT_TEACHER_TEMPLATE, metadata={"help": "teacher prompt with {prompt} and {privileged}"})
    grpolab_teacher_sync_steps: int = field(
        default=0, metadata={"help": "0: the live policy is the teacher; N: a frozen copy re-synced every N steps"})
    grpolab_privileged_placement: str = field(
        default="user", metadata={"help": "conversational prompts: user (in the last user turn) | system"})
    grpolab_teacher_chat_template: str = field(
        default=DEFAULT_CHAT_TEACHER_TEMPLATE, metadata={"help": "teacher user turn with {prompt} and {privileged}"})
    grpolab_teacher_system_template: str = field(
        default=DEFAULT_SYSTEM_TEACHER_TEMPLATE, metadata={"help": "teacher system note with {privileged}"})

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
        if self.grpolab_credit not in CREDITS + _NO_CREDIT:
            raise ValueError(f"grpolab_credit={self.grpolab_credit!r}; choose one of {CREDITS}")
        if self.grpolab_credit not in _NO_CREDIT:
            check_credit(name=self.grpolab_credit, lam=self.grpolab_credit_lam, eps_w=self.grpolab_credit_eps_w)
            check_credit(name=self.grpolab_credit, lam=self.grpolab_credit_lam_end, eps_w=self.grpolab_credit_eps_w)
            check_template(self.grpolab_teacher_template)
            check_template(self.grpolab_teacher_chat_template)
            check_template(self.grpolab_teacher_system_template, need_prompt=False)
            if self.grpolab_privileged_placement not in PLACEMENTS:
                raise ValueError(f"grpolab_privileged_placement={self.grpolab_privileged_placement!r}; "
                                 f"choose one of {PLACEMENTS}")
            if self.grpolab_gear_divergence not in GEAR_DIVERGENCES:
                raise ValueError(f"grpolab_gear_divergence={self.grpolab_gear_divergence!r}; "
                                 f"choose one of {GEAR_DIVERGENCES}")
            if self.grpolab_teacher_sync_steps < 0:
                raise ValueError("grpolab_teacher_sync_steps must be >= 0 (0: the live policy is the teacher)")


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
        raise ValueError(f"grpolab_credit={args.grpolab_credit!r} needs the dataset column {col!r} "
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
            raise ValueError(f"grpolab_credit: row {i} 'prompt' is a {type(prompt).__name__}; use text or a "
                             "conversation (a list of {'role', 'content'} messages)")
        for m in prompt:
            if not isinstance(m.get("content"), str):
                raise ValueError(f"grpolab_credit: row {i} has a message whose content is not a string "
                                 "(multimodal content parts are not supported by the teacher forward); use text "
                                 "messages or grpolab_credit='grpo'")


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
        teacher_model: optional teacher for ``grpolab_credit`` (default: the policy itself, shown
            the privileged prompt); it is used as given (no re-sync).
    """

    def __init__(self, *args, teacher_model: torch.nn.Module | None = None, **kwargs):
        cfg = kwargs.get("args", args[2] if len(args) > 2 else None)
        if not isinstance(cfg, GrpolabGRPOConfig):
            raise TypeError("GrpolabGRPOTrainer needs args=GrpolabGRPOConfig(...) (TRL's GRPOConfig plus grpolab_*)")
        if cfg.grpolab_credit not in _NO_CREDIT:  # refuse now, not after the model has loaded and generated
            check_credit_dataset(kwargs.get("train_dataset", args[3] if len(args) > 3 else None), cfg)
        super().__init__(*args, **kwargs)
        self._teacher_model = teacher_model
        self._teacher_copy: torch.nn.Module | None = None
        self._teacher_synced_at = -1

    # ------------------------------------------------------------------ generation batch
    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        mask = out["completion_mask"] if out.get("tool_mask") is None else out["completion_mask"] * out["tool_mask"]
        adv_B = out["advantages"]
        if self.args.grpolab_credit not in _NO_CREDIT and mode == "train":
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
        every = self.args.grpolab_teacher_sync_steps
        if every == 0:
            return policy
        step = self.state.global_step
        if self._teacher_copy is None or (step % every == 0 and step != self._teacher_synced_at):
            self._teacher_copy = copy.deepcopy(policy).eval().requires_grad_(False)
            self._teacher_synced_at = step
        return self._teacher_copy

    def teacher_prompt_ids(self, inputs, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded privileged teacher prompts ``([B, P'], [B, P'])``, one per input row.

        Text prompts: ``grpolab_teacher_template`` around the prompt. Conversations: the privileged
        context joins the conversation (:func:`~grpolab.rollout.teacher.teacher_messages`), rendered
        with TRL's chat-template call and the generation prompt, like the student's prompt.
        """
        from types import SimpleNamespace

        from grpolab.rollout import left_pad

        a = self.args
        col = a.grpolab_privileged_column
        for x in inputs:
            if col not in x:
                raise KeyError(f"grpolab_credit={a.grpolab_credit!r} needs the dataset column {col!r} "
                               f"(grpolab_privileged_column); the row has {sorted(x)}")
        if not _is_conversation(inputs[0]["prompt"]):
            texts = [a.grpolab_teacher_template.format(prompt=x["prompt"], privileged=x[col], reference=x[col])
                     for x in inputs]
            return encode_teacher_prompts(self.processing_class, texts, group_size=1, device=device)
        convs = []
        for x in inputs:
            item = SimpleNamespace(privileged=str(x[col]), reference=str(x[col]))
            convs.append(teacher_messages(x["prompt"], item, placement=a.grpolab_privileged_placement,
                                          template=a.grpolab_teacher_chat_template,
                                          system_template=a.grpolab_teacher_system_template))
        tok = self.processing_class
        rows = [list(tok.apply_chat_template(conversation=c, tools=self.tools or None, chat_template=self.chat_template,
                                             add_generation_prompt=True, tokenize=True, return_dict=True,
                                             **self.chat_template_kwargs)["input_ids"]) for c in convs]
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        return left_pad(rows, pad, device=device)

    @torch.no_grad()
    def _credit(self, inputs, out, mask, adv_B, mode):
        a = self.args
        device = out["completion_ids"].device
        t_ids, t_mask = self.teacher_prompt_ids(inputs, device)
        policy = self._policy()
        rollout = (out["prompt_ids"], out["prompt_mask"], out["completion_ids"], mask, out["completion_mask"])
        want_kl = a.grpolab_credit == "gear" and a.grpolab_gear_divergence == "kl"
        res = credit_logprobs(self._teacher(), policy, t_ids, t_mask, rollout, temperature=self.temperature,
                              return_kl=want_kl)  # the trainer's credit glue (grpolab.rollout.teacher)
        student = res.student_logp
        lam = lam_schedule(self.state.global_step, start=a.grpolab_credit_lam, end=a.grpolab_credit_lam_end,
                           steps=a.grpolab_credit_lam_steps,
                           kind="linear" if a.grpolab_credit_lam_steps > 0 else "constant")
        res_c = credit_advantages(a.grpolab_credit, adv_B, student.detach(), res.logp, mask, lam=lam,
                                  eps_w=a.grpolab_credit_eps_w, negative_only=a.grpolab_credit_negative_only,
                                  divergence=res.kl if want_kl else None)
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
