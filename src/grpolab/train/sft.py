"""Supervised warm start: next-token loss on task demonstrations, until a target accuracy.

RL needs something to reinforce: a model built from scratch solves nothing, so every reward is 0
and every group advantage is 0. ``run_sft`` trains on ``prompt -> demonstration + EOS`` pairs (loss
on completion tokens only) and stops as soon as greedy held-out accuracy reaches
``target_accuracy`` -- deliberately early, so that RL has headroom left. The prompts are the run's
(``SFTSpec.prompt_format``: on a chat-template run each demonstration is the assistant turn after
the rendered conversation, ending with the template's end of turn such as ``<|im_end|>``), so the
warm start teaches what RL then samples from.

With ``privileged_share`` > 0, that share of every batch is shown in the *teacher's prompt*
(``privileged prompt -> the same demonstration``, :class:`grpolab.teacher_text.TeacherPrompt`,
in the run's format), so the model also learns to continue correctly when a reference solution is
in its context: the self-teacher of RLSD / GEAR / OPSD (docs/credit.md) then reads the reference
instead of ignoring it. The student never sees it: rollouts and the stopping check use the
student's prompts.

Everything a warm start needs to continue lives in :class:`SFTState`. Given a ``checkpoint``
(:class:`grpolab.train.warm_start.WarmStartCheckpoint`), ``run_sft`` saves it every
``checkpoint.save_every`` steps and, when started again with the same settings, resumes from the
newest one; the result is bit-identical to a run that was never interrupted.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from grpolab.teacher_text import TeacherPrompt, check_template
from grpolab.train.checkpoint import rng_state, set_rng_state
from grpolab.measure.evaluate import evaluate
from grpolab.train.nonfinite import NonFiniteError, check_finite_loss, check_finite_norm, require_finite_model
from grpolab.train.optim import build_scheduler
from grpolab.rollout.prompts import encode_prompts
from grpolab.rollout.text import assistant_turn_end, encode_completion


@dataclass
class SFTResult:
    steps: int
    accuracy: float
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0  # training time, summed over the processes of a resumed warm start
    resumed_from: int = 0  # the step it resumed from (0: it did not resume)


@dataclass
class SFTState:
    """A warm start between two steps: what an in-progress checkpoint must hold.

    :meth:`state_dict` / :meth:`load_state_dict` are the only code that lists it, so saving and
    resuming cannot drift apart. The model's (raw) weights are saved separately, in Hugging Face
    format (:func:`grpolab.train.checkpoint.save_checkpoint`).

    Attributes:
        model: the model being trained, in place.
        optimizer, scheduler: AdamW and its learning-rate schedule.
        data_rng: draws each step's batch; the global python, numpy and torch streams are saved
            with it (a model with dropout draws from torch's).
        average: the exponential moving average of the weights (``ema`` > 0), else None.
        step: optimizer steps done; accuracy: that of the last check (before the first step: the
            starting model's); history: one row per check.
        seconds: training time spent by the processes before this one.
    """

    model: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    data_rng: random.Random
    average: "_WeightAverage | None" = None
    step: int = 0
    accuracy: float = 0.0
    history: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        """Everything but the model's weights."""
        return {
            "step": self.step, "accuracy": self.accuracy, "history": self.history, "seconds": self.seconds,
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "data_rng": self.data_rng.getstate(), "rng": rng_state(),
            "average": self.average.state_dict() if self.average is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the model's weights are loaded by the caller)."""
        if (state["average"] is None) != (self.average is None):
            raise ValueError("this warm-start checkpoint was saved " + ("without" if state["average"] is None
                             else "with") + " a weight average (sft.ema); resume it with the same sft.ema")
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.data_rng.setstate(state["data_rng"])
        set_rng_state(state["rng"])
        if self.average is not None:
            self.average.load_state_dict(state["average"])
        self.step, self.accuracy = int(state["step"]), float(state["accuracy"])
        self.history, self.seconds = list(state["history"]), float(state["seconds"])


def encode_transcript(tokenizer, transcript) -> tuple[list[int], list[int]]:
    """``(ids, labels)`` of a multi-turn transcript ``[[role, text], ...]`` (see grpolab.envs).

    Each ``"act"`` turn is followed by EOS (the model ends its turn with it) and is trained on;
    ``"obs"`` turns (the environment's replies) get label -100, exactly as the episode runner
    gives them response_mask 0.
    """
    ids: list[int] = []
    labels: list[int] = []
    for role, text in transcript:
        if role == "act":
            t = encode_completion(tokenizer, text)
            labels += t
        elif role == "obs":
            t = list(tokenizer(text, add_special_tokens=False)["input_ids"])
            labels += [-100] * len(t)
        else:
            raise ValueError(f"transcript roles are 'act' and 'obs', got {role!r}")
        ids += t
    return ids, labels


def sft_batch(tokenizer, items, device, *, teacher_rows: int = 0, teacher: TeacherPrompt | None = None,
              prompt_format=None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids [B,L]``, ``attention_mask [B,L]`` and ``labels [B,L]`` (-100 off-completion).

    Each prompt is encoded as the run prompts the policy: ``prompt_format`` (the run's resolved
    :class:`grpolab.tasks.PromptFormat`: chat template, system prompt, prompt template); None:
    ``item.prompt`` as plain text. The first ``teacher_rows`` rows use the privileged teacher's
    prompt instead (``teacher``, :class:`grpolab.teacher_text.TeacherPrompt`, in the same
    format, as the credit step's teacher sees it); the completion (and so the loss) is the same
    demonstration either way, followed by EOS (on a chat template: the template's end of an
    assistant turn, :func:`grpolab.rollout.text.assistant_turn_end`).
    """
    teacher = TeacherPrompt() if teacher is None else teacher
    if not 0 <= teacher_rows <= len(items):
        raise ValueError(f"teacher_rows={teacher_rows} must be in 0..{len(items)} (the batch size)")
    multi_turn = any(it.meta.get("transcript") for it in items)
    if teacher_rows and any(it.meta.get("transcript") for it in items[:teacher_rows]):
        raise ValueError("the teacher template applies to single-turn items; multi-turn transcripts "
                         "cannot be shown with a privileged prompt (set sft.privileged_share=0)")
    if multi_turn and prompt_format is not None and prompt_format.use_chat:
        raise ValueError("multi-turn demonstrations are plain-text transcripts; a chat-template prompt format "
                         "applies to single-turn items only")
    prompts = teacher.encode(items[:teacher_rows], tokenizer, prompt_format) if teacher_rows else []
    rest = items[teacher_rows:]
    if prompt_format is None:
        prompts += encode_prompts(tokenizer, [it.prompt for it in rest])
    else:
        prompts += prompt_format.encode(rest, tokenizer)
    end = assistant_turn_end(tokenizer) if prompt_format is not None and prompt_format.use_chat else None
    rows, labels = [], []
    for p, it in zip(prompts, items):
        if it.meta.get("transcript"):  # multi-turn: actions + EOS trained, observations masked
            c, lab = encode_transcript(tokenizer, it.meta["transcript"])
        else:
            c = lab = encode_completion(tokenizer, it.demonstration, end)
        rows.append(p + c)
        labels.append([-100] * len(p) + lab)
    L = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([r + [pad] * (L - len(r)) for r in rows], device=device)
    att = torch.tensor([[1] * len(r) + [0] * (L - len(r)) for r in rows], device=device)
    lab = torch.tensor([r + [-100] * (L - len(r)) for r in labels], device=device)
    return ids, att, lab


@dataclass(frozen=True)
class SFTSpec:
    """Everything the supervised warm start needs from the config, resolved once (like
    :class:`grpolab.train.policy_update.UpdateSpec` for the RL update). Checked when built.

    The fields named like ``sft.*`` keys (``max_steps``, ``batch_size``, ``lr``,
    ``target_accuracy``, ``eval_every``, ``schedule``, ``ema``, ``privileged_share``) mean what the
    key's help on :class:`grpolab.config.SFTConfig` says (``grpolab config sft``). How two of them
    work here: the last step always checks; with ``ema`` the averaged weights are
    ``avg <- d * avg + (1 - d) * w`` after every step, ``d = min(ema, (1 + step) / (10 + step))``
    (early averages do not cling to the random initialisation), and they are what is checked and
    returned.

    Attributes (the spec's own):
        max_new_tokens: the checks' completion length.
        warmup_steps: the learning rate warms up linearly over these steps, then follows ``schedule``.
        seed: draws the batches.
        teacher: the privileged prompt of the ``privileged_share`` rows (the checks always use the
            student's prompts).
        prompt_format: the run's resolved :class:`grpolab.tasks.PromptFormat` (the collector's):
            demonstrations are shown as the run prompts the policy; None: ``item.prompt`` as plain text.
        env: the run's :class:`grpolab.config.EnvConfig` (multi-turn checks play episodes), or None.
    """

    max_steps: int
    batch_size: int
    lr: float
    target_accuracy: float
    eval_every: int
    max_new_tokens: int
    schedule: str = "constant"
    warmup_steps: int = 20
    ema: float = 0.0
    seed: int = 0
    privileged_share: float = 0.0
    teacher: TeacherPrompt = field(default_factory=TeacherPrompt)
    env: Any = None
    prompt_format: Any = None

    def __post_init__(self) -> None:
        share = self.privileged_share
        if isinstance(share, bool) or not 0.0 <= share < 1.0:
            raise ValueError(f"privileged_share={share!r} must be in [0, 1) (0 = off; e.g. 0.5)")
        if share > 0:
            if self.env is not None and getattr(self.env, "name", ""):
                raise ValueError("privileged_share > 0 needs a single-turn task; multi-turn environments have "
                                 "no teacher template (set sft.privileged_share=0)")
            check_template(self.teacher.template)

    @classmethod
    def from_config(cls, cfg, *, prompt_format=None) -> "SFTSpec":
        """The ``sft`` section of a run config, with the run's check length, seed, env, teacher prompt
        and (resolved) ``prompt_format``."""
        s = cfg.sft
        return cls(max_steps=s.max_steps, batch_size=s.batch_size, lr=s.lr, target_accuracy=s.target_accuracy,
                   eval_every=s.eval_every, max_new_tokens=cfg.rollout.max_new_tokens, schedule=s.schedule,
                   ema=s.ema, seed=cfg.trainer.seed, privileged_share=s.privileged_share,
                   teacher=cfg.credit.teacher_prompt(), env=cfg.env, prompt_format=prompt_format)


def run_sft(model, tokenizer, train_items, eval_items, spec: SFTSpec, *, log=print, checkpoint=None,
            collector=None) -> SFTResult:
    """Train ``model`` in place on demonstrations until a check reaches ``spec.target_accuracy``
    (or ``spec.max_steps``); returns the steps taken and the final accuracy.

    ``checkpoint``: a :class:`grpolab.train.warm_start.WarmStartCheckpoint` (``load(model)`` ->
    state or None, ``save(step, model, tokenizer, state)``, ``save_every``), or None for none.
    The warm start resumes from what ``load`` returns, and saves after every ``save_every``-th
    step (0: never) unless it has just finished (the caller writes the final model then). A
    checkpoint with ``snapshot_every`` > 0 also keeps the (checked, i.e. averaged with ``ema``)
    model of every ``snapshot_every``-th step through ``snapshot(step, model, tokenizer, info)``.

    ``collector``: how the accuracy checks sample and score (the run's collector, with its prompt
    format and stop tokens: :func:`grpolab.rollout.collector.collector_for`); None: plain-text
    prompts, the tokenizer's EOS and ``spec.env``.
    """
    demos = [it for it in train_items if it.demonstration]
    if not demos:  # a config problem the user fixes (one error line on the CLI)
        from grpolab.config import ConfigError

        raise ConfigError(
            "supervised warm start needs task items with a demonstration; this task has none "
            "(set sft.enabled=no, or start from a model that already solves some items)"
        )

    def check() -> float:
        return evaluate(model, tokenizer, eval_items, max_new_tokens=spec.max_new_tokens, env=spec.env,
                        collector=collector).accuracy

    state = _initial_state(model, spec)
    start = time.time()
    saved = checkpoint.load(model) if checkpoint is not None else None
    if saved is not None:
        state.load_state_dict(saved)
    else:
        state.accuracy = check()
    resumed_from = state.step
    loop_start = time.time()

    def _eta(step: int) -> str:
        """The rate and the time left if the warm start runs to ``max_steps`` (it may stop earlier)."""
        from grpolab.utils.progress import format_seconds

        done = step - resumed_from
        if done <= 0:
            return ""
        rate = (time.time() - loop_start) / done
        return f"  ({rate:.2f} s/step, at most {format_seconds(rate * (spec.max_steps - step))} left)"

    while state.step < spec.max_steps and state.accuracy < spec.target_accuracy:
        loss, lr_used = _sft_step(state, tokenizer, demos, spec)
        step = state.step
        if step % spec.eval_every == 0 or step == spec.max_steps:
            with _averaged(state):
                state.accuracy = check()
            state.history.append({"step": step, "loss": loss, "accuracy": state.accuracy, "lr": lr_used})
            log(f"sft step {step:4d}  loss {loss:.3f}  greedy accuracy {state.accuracy:.3f}{_eta(step)}")
        finished = step >= spec.max_steps or state.accuracy >= spec.target_accuracy
        if checkpoint is not None:
            start = _keep(checkpoint, state, tokenizer, finished=finished, started=start)
    if state.average is not None and state.step > 0:
        state.average.copy_to_model()
    model.eval()
    return SFTResult(steps=state.step, accuracy=state.accuracy, history=state.history,
                     seconds=state.seconds + time.time() - start, resumed_from=resumed_from)


def _initial_state(model, spec: SFTSpec) -> SFTState:
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0, betas=(0.9, 0.98))
    return SFTState(
        model=model, optimizer=opt, data_rng=random.Random(spec.seed),
        scheduler=build_scheduler(opt, warmup_steps=spec.warmup_steps, total_steps=spec.max_steps,
                                  schedule=spec.schedule),
        average=_WeightAverage(model, spec.ema) if spec.ema > 0 else None,
    )


def _sft_step(state: SFTState, tokenizer, demos, spec: SFTSpec) -> tuple[float, float]:
    """One optimizer step on a batch of demonstrations; returns ``(loss, learning rate used)``."""
    model, opt = state.model, state.optimizer
    model.train()
    batch = state.data_rng.sample(demos, min(spec.batch_size, len(demos)))
    ids, att, lab = sft_batch(tokenizer, batch, next(model.parameters()).device,
                              teacher=spec.teacher, prompt_format=spec.prompt_format,
                              teacher_rows=round(spec.privileged_share * len(batch)))
    loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
    try:  # the non-finite guard (grpolab.train.nonfinite): the warm start stops at the step it diverges
        check_finite_loss(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        check_finite_norm(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)))
        opt.step()
        require_finite_model(model, "weights after the optimizer step", trainable_only=True)
    except NonFiniteError as e:
        raise NonFiniteError(f"the warm start stopped at its step {state.step + 1}: {e}; nothing of it was saved. "
                             f"To fix: lower sft.lr, or train in float32 or bfloat16 (model.dtype)") from None
    lr_used = opt.param_groups[0]["lr"]
    state.scheduler.step()
    state.step += 1
    if state.average is not None:
        state.average.update(state.step)
    return loss.item(), lr_used


def _averaged(state: SFTState):
    """The weight average swapped in (``ema`` > 0) for a check or a snapshot, else nothing."""
    return state.average.swapped_in() if state.average is not None else contextlib.nullcontext()


def _keep(checkpoint, state: SFTState, tokenizer, *, finished: bool, started: float) -> float:
    """Snapshot and checkpoint the step when due; returns the new start of the timed span."""
    step = state.step
    if getattr(checkpoint, "snapshot_every", 0) and step % checkpoint.snapshot_every == 0:
        checked = state.history[-1]["accuracy"] if state.history and state.history[-1]["step"] == step else None
        with _averaged(state):
            checkpoint.snapshot(step, state.model, tokenizer, {"step": step, "accuracy": checked})
    if checkpoint.save_every and step % checkpoint.save_every == 0 and not finished:
        state.seconds += time.time() - started
        started = time.time()
        checkpoint.save(step, state.model, tokenizer, state.state_dict())
    return started


class _WeightAverage:
    """An exponential moving average of a model's parameters (buffers are left alone)."""

    def __init__(self, model, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema decay must be in (0, 1), got {decay}")
        self.model, self.decay = model, decay
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.avg = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def update(self, step: int) -> None:
        d = min(self.decay, (1 + step) / (10 + step))
        for a, p in zip(self.avg, self.params):
            a.lerp_(p.detach(), 1.0 - d)

    def state_dict(self) -> list[torch.Tensor]:
        return [a.detach().to("cpu", copy=True) for a in self.avg]

    @torch.no_grad()
    def load_state_dict(self, avg: list[torch.Tensor]) -> None:
        if len(avg) != len(self.avg) or any(a.shape != b.shape for a, b in zip(avg, self.avg)):
            raise ValueError("the saved weight average does not match this model's parameters")
        for a, saved in zip(self.avg, avg):
            a.copy_(saved)

    @torch.no_grad()
    def copy_to_model(self) -> None:
        for a, p in zip(self.avg, self.params):
            p.copy_(a)

    @contextlib.contextmanager
    def swapped_in(self):
        """Evaluate with the averaged weights; the raw weights are restored afterwards."""
        raw = [p.detach().clone() for p in self.params]
        self.copy_to_model()
        try:
            yield
        finally:
            with torch.no_grad():
                for r, p in zip(raw, self.params):
                    p.copy_(r)
