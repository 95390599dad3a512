"""Dataclass configs with validation, YAML loading and ``--set key=value`` overrides.

A run is described by one :class:`Config` made of sections (``model``, ``task``, ``sft``,
``rollout``, ``objective``, ``optim``, ``trainer``, ``log``). Every problem -- an unknown key, a value
of the wrong type, a name not in a registry, an impossible combination -- raises
:class:`ConfigError` before any work starts, with a message that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from grpolab.errors import ConfigError  # re-exported: the leaf module is its home
from grpolab.utils.teacher_templates import (
    DEFAULT_CHAT_TEACHER_TEMPLATE,
    DEFAULT_SYSTEM_TEACHER_TEMPLATE,
    DEFAULT_TEACHER_TEMPLATE,
)


def _key(default: Any = dataclasses.MISSING, meaning: str = "", *, form: str = "", more: str = "",
         default_factory: Any = dataclasses.MISSING) -> Any:
    """A config key: its default and its help, written once, on the field (``grpolab config``, the
    TRL adapter's argument help and :data:`grpolab.config_help.KEY_HELP` read it from here).

    ``meaning``: one line; ``form``: the values it takes beyond its type ("" when the type says it
    all); ``more``: anything else a user of the key should know."""
    return field(default=default, default_factory=default_factory,
                 metadata={"help": meaning, "form": form, "more": more})


def _registry(name: str) -> Callable[[], list[str]]:
    def names() -> list[str]:
        from grpolab import objectives as obj

        return getattr(obj, name).names()

    return names


def _tasks() -> list[str]:
    from grpolab.tasks import list_tasks

    return list_tasks()


def _envs() -> list[str]:
    from grpolab.envs import list_envs

    return list_envs()


#: The allowed values of every setting that takes a name: what the validators check and what
#: ``grpolab config`` prints (static tuples, or the registry the name must come from).
CHOICES: dict[str, Callable[[], Sequence[str]]] = {
    "model.dtype": lambda: ("auto", "float32", "bfloat16", "float16"),
    "model.device": lambda: ("auto", "cpu", "cuda", "cuda:N", "mps"),
    "model.lora_save": lambda: ("merged", "adapter", "both"),
    "model.tokenizer_alphabet": lambda: ("default", "printable"),
    "task.name": _tasks,
    "task.chat_template": lambda: ("auto", "on", "off"),
    "sft.enabled": lambda: ("auto", "yes", "no", "true", "false"),
    "rollout.prompt_truncation": lambda: ("error", "left", "right"),
    "sft.select_on": lambda: ("validation", "heldout"),
    "sft.schedule": lambda: ("constant", "linear", "cosine"),
    "objective.advantage": _registry("ADVANTAGE_ESTIMATORS"),
    "objective.ratio": _registry("RATIO_LEVELS"),
    "objective.aggregation": _registry("AGGREGATIONS"),
    "objective.kl_estimator": _registry("KL_ESTIMATORS"),
    "optim.schedule": lambda: ("constant", "linear", "cosine"),
    "log.wandb_mode": lambda: ("online", "offline", "disabled"),
    "log.metric_names": lambda: ("grpolab", "both"),
    "credit.name": _registry("CREDIT_METHODS"),
    "credit.lam_schedule": lambda: ("linear", "constant"),
    "credit.teacher": lambda: ("frozen", "live"),
    "credit.privileged_placement": lambda: ("user", "system"),
    "credit.divergence": lambda: ("kl", "logratio"),
    "credit.gear_threshold": lambda: ("mad", "quantile"),
    "credit.gear_anchor": lambda: ("departure", "spike"),
    "env.name": lambda: ("",) + tuple(_envs()),
}


def _choice(key: str, value: Any, allowed: Sequence[str] | None = None) -> None:
    """Refuse ``value`` unless it is one of ``allowed`` (default: :data:`CHOICES` of ``key``)."""
    if allowed is None:
        allowed = CHOICES[key]()
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not allowed; choose one of: {', '.join(map(str, allowed))}")


def _positive(key: str, value: float, *, zero_ok: bool = False) -> None:
    if value < 0 or (value == 0 and not zero_ok):
        raise ConfigError(f"{key}={value!r} must be {'>= 0' if zero_ok else '> 0'}")


@dataclass
class ModelConfig:
    """The policy. ``path=None`` builds grpolab's tiny Llama-architecture model from scratch.
    Each key's help is on its field (``grpolab config model``)."""

    path: str | None = _key(
        None, "the policy; null builds the tiny built-in model", form="a local HF model directory or .gguf file; null")
    hidden_size: int = _key(192, "tiny model width", form="> 0")
    num_layers: int = _key(4, "tiny model decoder blocks", form="> 0")
    num_heads: int = _key(4, "tiny model attention heads", form="> 0, divides hidden_size")
    intermediate_size: int = _key(512, "tiny model MLP width", form="> 0")
    dtype: str = _key("auto", "weights dtype (auto: the checkpoint's own)",
                      more="auto keeps torch_dtype of the checkpoint's config.json (float32 for the tiny model)")
    device: str = _key("auto", "where the model runs (auto: cuda when available, else cpu)")
    attn_implementation: str = _key("", "passed to from_pretrained", form="'' or sdpa, eager, flash_attention_2",
                                    more="'' = transformers' default")
    gradient_checkpointing: bool = _key(
        False, "recompute activations in the backward (less memory, ~30% slower update)")
    lora: dict[str, Any] = _key(
        default_factory=dict, meaning="LoRA adapters through peft ({} = full fine-tuning)",
        form="{} or {r, alpha, dropout, target_modules}",
        more=("The reference and the RLSD/GEAR teacher are then the base model with the adapters disabled "
              "(no second copy of the weights)."))
    lora_save: str = _key("merged", "what RUN_DIR/final holds with LoRA",
                          more=("merged: a plain HF model; adapter: adapter_model.safetensors + adapter_config.json; "
                                "both: merged in final, the adapter in final/adapter"))
    tokenizer_alphabet: str = _key("default", "the tiny model's tokenizer alphabet",
                                   more="default: lower case (grpolab.models.tokenizer); printable")

    def validate(self) -> None:
        if self.path is not None and not str(self.path).strip():
            raise ConfigError("model.path is empty; give a local model directory, or leave it unset (null) "
                              "for the built-in tiny model")
        _choice("model.dtype", self.dtype)
        import re

        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", str(self.device)):
            raise ConfigError(f"model.device={self.device!r} is not allowed; choose one of: auto, cpu, cuda, "
                              "cuda:N (a GPU index), mps")
        _choice("model.lora_save", self.lora_save)
        _choice("model.tokenizer_alphabet", self.tokenizer_alphabet)
        for k in ("hidden_size", "num_layers", "num_heads", "intermediate_size"):
            _positive(f"model.{k}", getattr(self, k))
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model.hidden_size={self.hidden_size} must be divisible by model.num_heads={self.num_heads}"
            )
        if not isinstance(self.lora, dict):
            raise ConfigError(f"model.lora must be a mapping such as {{r: 16, alpha: 32}}, got {self.lora!r}")
        if self.lora:
            from grpolab.models.lora import LoraSettings

            try:
                LoraSettings.from_dict(self.lora)
            except ValueError as e:
                raise ConfigError(f"model.lora: {e}") from None


@dataclass
class TaskConfig:
    """Where prompts and rewards come from: a built-in task name, ``dataset`` or ``reasoning_gym``,
    and how prompts are formatted (:class:`grpolab.tasks.PromptFormat`). Each key's help is on its
    field (``grpolab config task``)."""

    name: str = _key("arith", "where prompts and rewards come from (docs/tasks.md)")
    options: dict[str, Any] = _key(
        default_factory=dict,
        meaning="the task's own options (e.g. max_digits) and reward (a name, module:function or a weighted list)",
        more=("options.reward (any task): a registered name, 'package.module:function', an entry point of the "
              "grpolab.rewards group, or a list of {name, weight, options} summed with their weights; checked (and "
              "a user module imported) at config time (grpolab.rewards.resolve_reward, docs/rewards.md)"))
    n_train: int | None = _key(
        None, "training items (null: all rows / 4096 generated)", form="> 0 or null (all)",
        more=("null (or all) takes every row of a dataset and 4096 items of a generated task (its prompt space has no "
              "end); a number larger than a dataset's split is an error that names the split's size"))
    n_eval: int | None = _key(None, "held-out items (null: all rows / 256 generated)", form="> 0 or null (all)")
    chat_template: str = _key("auto", "render prompts with the tokenizer's chat template (auto: when it has one)")
    system_prompt: str = _key("", "system message (chat template) or preamble")
    prompt_template: str = _key("{prompt}", "wraps every prompt", form="text with {prompt}",
                                more="e.g. '{prompt}\\nPut the final answer after ####.'")

    def validate(self) -> None:
        for k in ("n_train", "n_eval"):
            if getattr(self, k) is not None:
                _positive(f"task.{k}", getattr(self, k))
        if not isinstance(self.options, dict):
            raise ConfigError(f"task.options must be a mapping, got {type(self.options).__name__}")
        from grpolab.tasks import list_tasks
        from grpolab.tasks.base import task_options

        _choice("task.name", self.name)
        allowed = task_options(self.name)
        unknown = sorted(set(self.options) - set(allowed)) if allowed is not None else []
        if unknown:
            raise ConfigError(f"task.options.{unknown[0]} is not an option of task {self.name!r}; its options: "
                              f"{', '.join(allowed)}")
        if "reward" in self.options:  # a user's module:function is imported here, at config time
            from grpolab.rewards import resolve_reward

            try:
                resolve_reward(self.options["reward"])
            except ValueError as e:
                raise ConfigError(f"task.options.reward: {e}") from None
        try:
            self.prompt_format()
        except ValueError as e:
            raise ConfigError(f"task: {e}") from None

    def prompt_format(self):
        """The :class:`grpolab.tasks.PromptFormat` of these settings (``auto`` still unresolved)."""
        from grpolab.tasks.prompt import PromptFormat

        return PromptFormat(chat_template=self.chat_template, system_prompt=self.system_prompt,
                            prompt_template=self.prompt_template)


@dataclass
class SFTConfig:
    """Supervised warm start on task demonstrations (used for the built-in tiny model)."""

    enabled: str = _key("auto", "supervised warm start before RL (auto: only for a model built from scratch)")
    max_steps: int = _key(1000, "warm-start steps at most", form=">= 0")
    batch_size: int = _key(64, "demonstrations per warm-start step", form="> 0")
    lr: float = _key(
        1e-3, "warm-start learning rate", form="> 0",
        more="3e-3 oscillates and learns the tiny model 2-4x slower (CHANGELOG.md)")
    schedule: str = _key(
        "constant", "warm-start learning-rate schedule after 20 warm-up steps",
        more="after 20 warm-up steps: constant, or linear/cosine decay to 0 at max_steps")
    ema: float = _key(0.0, "evaluate and keep an exponential moving average of the weights (0 = off)", form="[0, 1)")
    target_accuracy: float = _key(0.4, "stop the warm start at this greedy accuracy", form="[0, 1]")
    eval_every: int = _key(25, "warm-start steps between accuracy checks", form="> 0")
    save_every: int | None = _key(
        None, "steps between in-progress checkpoints (null: at each check; 0: never)", form=">= 0 or null",
        more=("Steps between in-progress checkpoints (RUN_DIR/sft.partial, or OUT.partial for `grpolab sft --out "
              "OUT`), from which a killed warm start run again with the same settings resumes exactly. None "
              "(default): at each check (every eval_every steps); 0: never."))
    snapshot_every: int = _key(
        0, "steps between kept warm-start snapshots (0: none)", form=">= 0",
        more=("Steps between kept snapshots of the warm start (HF model directories, RUN_DIR/sft.snapshots/ "
              "step_N or OUT.snapshots/step_N), e.g. to measure headroom against the warm-start budget or to "
              "start RL from a shorter warm start; 0 (default): none. They stay after the warm start ends."))
    n_eval: int = _key(256, "items of each warm-start accuracy check", form="> 0")
    select_on: str = _key(
        "validation", "which items decide when the warm start stops",
        more=("Which items decide when to stop: \"validation\" = the last n_eval training items, held out of the "
              "demonstrations (the held-out test set stays untouched until RL measures its gain); \"heldout\" = the"
              " first n_eval held-out items (model selection on the test set, which biases the measured start "
              "accuracy upwards; the default before, see CHANGELOG.md)."))
    privileged_share: float = _key(
        0.0, "share of each batch shown in the teacher template (RLSD/GEAR/OPSD)", form="[0, 1)",
        more=("Share of every supervised batch shown in the teacher template (credit.template: privileged prompt "
              "-> the same demonstration), so that the self-teacher of RLSD/GEAR/OPSD learns to read the "
              "reference; 0 = off. See docs/credit.md."))

    def validate(self) -> None:
        # true/false like every other boolean setting, as well as yes/no
        words = {"true": "yes", "on": "yes", "1": "yes", "false": "no", "off": "no", "0": "no"}
        self.enabled = words.get(str(self.enabled).lower(), self.enabled)
        _choice("sft.enabled", self.enabled)
        if isinstance(self.privileged_share, bool) or not 0 <= self.privileged_share < 1:
            raise ConfigError(f"sft.privileged_share={self.privileged_share} must be in [0, 1) "
                              "(0 = off; e.g. 0.5)")
        _choice("sft.select_on", self.select_on)
        _choice("sft.schedule", self.schedule)
        if not 0 <= self.ema < 1:
            raise ConfigError(f"sft.ema={self.ema} must be in [0, 1) (0 = off; e.g. 0.99)")
        _positive("sft.max_steps", self.max_steps, zero_ok=True)
        _positive("sft.batch_size", self.batch_size)
        _positive("sft.lr", self.lr)
        _positive("sft.eval_every", self.eval_every)
        _positive("sft.n_eval", self.n_eval)
        if self.save_every is not None:
            if isinstance(self.save_every, bool) or not isinstance(self.save_every, int) or self.save_every < 0:
                raise ConfigError(f"sft.save_every={self.save_every!r} must be a whole number of steps >= 0 "
                                  "(0 = never; unset or null = at each check, every sft.eval_every steps)")
        if isinstance(self.snapshot_every, bool) or not isinstance(self.snapshot_every, int) or self.snapshot_every < 0:
            raise ConfigError(f"sft.snapshot_every={self.snapshot_every!r} must be a whole number of steps >= 0 "
                              "(0 = no snapshots; e.g. 100)")
        if not 0 <= self.target_accuracy <= 1:
            raise ConfigError(f"sft.target_accuracy={self.target_accuracy} must be in [0, 1]")


@dataclass
class RolloutConfig:
    prompts_per_step: int = _key(32, "prompts (groups) per training step", form="> 0")
    group_size: int = _key(8, "samples per prompt", form="> 0 (>= 2 for group advantages)")
    max_new_tokens: int = _key(48, "longest response, in tokens", form="> 0")
    temperature: float = _key(1.0, "sampling temperature", form="> 0")
    top_p: float = _key(1.0, "nucleus sampling", form="(0, 1]")
    top_k: int = _key(
        0, "sample from the top_k most likely tokens only (0 = off; single-turn)", form=">= 0",
        more=("Truncation before top_p, as in TRL/vLLM: keep the top_k most likely tokens (0 = off) and those "
              "with probability >= min_p x the most likely one's (0 = off). Single-turn sampling only."))
    min_p: float = _key(
        0.0, "drop tokens below min_p x the top token's probability (0 = off; single-turn)", form="[0, 1)")
    repetition_penalty: float = _key(
        1.0,
        "divide (multiply) the logits of tokens already seen when drawing (transformers' "
        "repetition_penalty; single-turn)",
        form="> 0 (1 = off)",
        more=("> 1 discourages tokens already in the prompt or response when drawing (CTRL / transformers' "
              "repetition_penalty); the log-probs the ratio uses stay the policy's. 1 = off. Single-turn only."))
    reward_workers: int = _key(
        1, "processes for CPU-heavy verifiers (1 = in the trainer)", form="> 0",
        more=("Processes for verifiers that cost CPU (math-verify on LaTeX, sql, json_schema): 1 = score in the "
              "trainer's process (fastest for cheap checks such as plain numbers: no IPC). Sandboxed code "
              "verification always runs in parallel over the fork-server pool, whatever this is."))
    user_reward_process: bool = _key(
        False, "run the config's own rewards (module:function, entry points) in a worker process",
        more=("In-process (the default), a reward that calls sys.exit or raises KeyboardInterrupt already scores 0 "
              "as a failing reward and a working-directory change is undone; os._exit or a crash ends the trainer. "
              "true: each call goes to one spawned worker process, and a worker that exits, crashes or times out "
              "scores that completion 0 (the failing-reward warning) and is replaced. One pipe round trip per "
              "completion. Built-in rewards are unaffected (rollout.reward_workers)."))
    dynamic_sampling: bool = _key(
        False, "DAPO dynamic sampling: drop groups whose rewards are all equal, refill",
        more=("DAPO's dynamic sampling (verl algorithm.filter_groups): drop every prompt group whose rewards are "
              "all equal and sample more prompts until prompts_per_step groups with signal are kept, for at most "
              "dynamic_sampling_rounds rounds per step (the first included); each round samples ceil(missing "
              "groups * dynamic_sampling_oversample) prompts. See grpolab.train.step_batch."))
    dynamic_sampling_rounds: int = _key(4, "sampling rounds per step at most (the first included)", form="1 to 64")
    dynamic_sampling_oversample: float = _key(
        1.0, "each round samples ceil(missing groups x this) prompts", form="1 to 16")
    max_prompt_tokens: int = _key(
        512,
        "longest prompt in tokens (0 = the model's context less max_new_tokens; never above it); checked "
        "for every item before any work (single-turn: an environment writes its episodes' prompts)",
        form=">= 0",
        more=("The longest prompt, in tokens (TRL max_prompt_length and verl data.max_prompt_length, both 512 by "
              "default); 0 = the model's context (max_position_embeddings) less max_new_tokens. The limit in use "
              "is never above that context room. Checked for every training and held-out item before any work: a "
              "longer prompt is an error naming the item (prompt_truncation=error, default), or keeps its last "
              "(left: the question's end and the chat template's generation prompt stay) or first (right) tokens,"
              " as verl's data.truncation does."))
    prompt_truncation: str = _key(
        "error",
        "a longer prompt: error naming the item, or keep its last (left) or first (right) max_prompt_tokens"
        " tokens")

    #: Bounds of dynamic sampling: beyond them one step samples for minutes (rounds x oversample x
    #: prompts_per_step x group_size responses at most).
    MAX_ROUNDS: typing.ClassVar[int] = 64
    MAX_OVERSAMPLE: typing.ClassVar[float] = 16.0

    def validate(self) -> None:
        _positive("rollout.reward_workers", self.reward_workers)
        if not 1 <= self.dynamic_sampling_rounds <= self.MAX_ROUNDS:
            raise ConfigError(f"rollout.dynamic_sampling_rounds={self.dynamic_sampling_rounds} must be in "
                              f"[1, {self.MAX_ROUNDS}] (each round samples a new batch; verl's max_num_gen_batches "
                              "is 10; e.g. 4)")
        if not 1 <= self.dynamic_sampling_oversample <= self.MAX_OVERSAMPLE:
            raise ConfigError(f"rollout.dynamic_sampling_oversample={self.dynamic_sampling_oversample} must be "
                              f"in [1, {self.MAX_OVERSAMPLE:g}] (1 = sample exactly the missing groups each round; "
                              "e.g. 1.5)")
        if isinstance(self.max_prompt_tokens, bool) or self.max_prompt_tokens < 0:
            raise ConfigError(f"rollout.max_prompt_tokens={self.max_prompt_tokens!r} must be >= 0 (0 = the "
                              "model's context less rollout.max_new_tokens; e.g. 512)")
        _choice("rollout.prompt_truncation", self.prompt_truncation)
        _positive("rollout.prompts_per_step", self.prompts_per_step)
        _positive("rollout.group_size", self.group_size)
        _positive("rollout.max_new_tokens", self.max_new_tokens)
        _positive("rollout.temperature", self.temperature)
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"rollout.top_p={self.top_p} must be in (0, 1]")
        _positive("rollout.top_k", self.top_k, zero_ok=True)
        if not 0 <= self.min_p < 1:
            raise ConfigError(f"rollout.min_p={self.min_p} must be in [0, 1) (0 = off; e.g. 0.05)")
        _positive("rollout.repetition_penalty", self.repetition_penalty)


@dataclass
class ObjectiveConfig:
    """The policy-gradient objective; see :func:`grpolab.objectives.policy_loss`."""

    advantage: str = _key("grpo", "advantage estimator (docs/methods.md)")
    ratio: str = _key("token", "importance-ratio level")
    aggregation: str = _key("token", "how token losses are summed into the batch loss")
    clip_low: float = _key(0.2, "lower clip: ratio >= 1 - clip_low", form=">= 0 (< 1 unless cumulative)")
    clip_high: float = _key(0.28, "upper clip: ratio <= 1 + clip_high (DAPO clip-higher 0.28)", form=">= 0")
    dual_clip: float | None = _key(3.0, "dual-clip constant for negative advantages", form="> 1 or null (off)")
    clip_power: float = _key(0.5, "CTPO's position exponent p in s_t = pos_t ** p", form=">= 0")
    kl_coef: float = _key(0.0, "weight of the KL penalty to the reference policy (0 = no reference)", form=">= 0")
    kl_estimator: str = _key("k3", "KL estimator")
    mask_truncated: bool = _key(
        False, "truncated responses get no loss (TRL mask_truncated_completions)",
        more=("Responses that hit the length cap without ending get no loss at all (DAPO's overlong filtering; "
              "TRL mask_truncated_completions)."))
    overlong_buffer: float = _key(
        0.0, "DAPO soft overlong punishment: the buffer before the length cap (0 = off)",
        form="0, a share in (0, 1), or whole tokens >= 1",
        more=("DAPO's soft overlong punishment (verl reward_model.overlong_buffer): the last overlong_buffer "
              "tokens before the length cap cost up to overlong_penalty reward, linearly. >= 1: tokens; in (0, "
              "1): a share of the longest response (DAPO: 4096 of 20480 = 0.2); 0 = off."))
    overlong_penalty: float = _key(1.0, "the punishment at the length cap (DAPO: 1)", form=">= 0")

    #: The fields that are keyword arguments of :func:`grpolab.objectives.policy_loss`: what the
    #: update's :class:`grpolab.train.policy_update.LossSpec` hands on (:meth:`loss_kwargs`).
    LOSS_KEYS: typing.ClassVar[tuple[str, ...]] = (
        "ratio", "aggregation", "clip_low", "clip_high", "dual_clip", "clip_power", "kl_coef", "kl_estimator")

    def loss_kwargs(self) -> dict[str, Any]:
        """``{key: value}`` of :data:`LOSS_KEYS`: keyword arguments of ``policy_loss``."""
        return {k: getattr(self, k) for k in self.LOSS_KEYS}

    def validate(self) -> None:
        from grpolab import objectives as obj

        if self.overlong_buffer < 0 or (self.overlong_buffer >= 1 and not float(self.overlong_buffer).is_integer()):
            raise ConfigError(f"objective.overlong_buffer={self.overlong_buffer} must be 0 (off), a share of the "
                              "longest response in (0, 1) (e.g. 0.2), or a whole number of tokens (e.g. 16)")
        _positive("objective.overlong_penalty", self.overlong_penalty, zero_ok=True)

        _choice("objective.advantage", self.advantage)
        _choice("objective.ratio", self.ratio)
        _choice("objective.aggregation", self.aggregation)
        _choice("objective.kl_estimator", self.kl_estimator)
        try:
            obj.check_objective(**self.loss_kwargs(), max_len=1)
        except ValueError as e:
            raise ConfigError(f"objective: {e}") from None
        if self.ratio == "cumulative" and self.clip_low >= 0.2:
            # Not an error (a user may want it), but almost always a mistake: CTPO's bounds scale
            # with sqrt(position), so PPO-sized clip values leave the ratio effectively unclipped.
            import warnings

            warnings.warn(
                "objective.ratio=cumulative with clip_low/clip_high sized for PPO; CTPO's defaults "
                "are clip_low=0.025, clip_high=0.05 (use the 'ctpo' preset)",
                stacklevel=2,
            )


@dataclass
class OptimConfig:
    lr: float = _key(1e-4, "RL learning rate (AdamW)", form="> 0")
    weight_decay: float = _key(0.0, "AdamW weight decay", form=">= 0")
    beta1: float = _key(0.9, "AdamW beta1", form="[0, 1)")
    beta2: float = _key(0.99, "AdamW beta2", form="[0, 1)")
    warmup_steps: int = _key(5, "linear warm-up steps", form=">= 0")
    schedule: str = _key("constant", "learning-rate schedule after warm-up")
    grad_clip: float = _key(1.0, "gradient-norm clip (0 = none)", form=">= 0")

    def validate(self) -> None:
        _positive("optim.lr", self.lr)
        _positive("optim.weight_decay", self.weight_decay, zero_ok=True)
        _positive("optim.warmup_steps", self.warmup_steps, zero_ok=True)
        _choice("optim.schedule", self.schedule)
        _positive("optim.grad_clip", self.grad_clip, zero_ok=True)
        for k in ("beta1", "beta2"):
            if not 0 <= getattr(self, k) < 1:
                raise ConfigError(f"optim.{k}={getattr(self, k)} must be in [0, 1)")


@dataclass
class TrainerConfig:
    steps: int = _key(400, "RL steps", form="> 0")
    epochs: int = _key(1, "passes over each rollout batch", form="> 0")
    mini_batches: int = _key(1, "optimizer steps per pass (split along groups)", form="> 0, <= prompts_per_step")
    micro_batch_size: int = _key(0, "sequences per forward/backward (0 = fill micro_batch_tokens)", form=">= 0")
    micro_batch_tokens: int = _key(
        0,
        "padded tokens per forward/backward when micro_batch_size = 0; 0 = auto (about 1 GiB of activations"
        " on CPU, 1/8 of GPU memory)",
        form=">= 0",
        more=("padded tokens per forward/backward when micro_batch_size = 0; 0 = auto: sized from the model so "
              "the saved activations stay near 1 GiB on CPU (grpolab.train.policy_update.auto_micro_batch_tokens)"))
    policy_lag: int = _key(0, "rollouts come from the policy this many updates old", form=">= 0")
    skip_zero_advantage: bool = _key(True, "no forward/backward for rows whose loss is exactly 0")
    share_prompts: bool = _key(True, "the update forwards each distinct prompt of a micro-batch once")
    preflight: bool = _key(
        True, "run `grpolab preflight` before RL (RUN_DIR/preflight.md)",
        more="run the preflight before RL (RUN_DIR/preflight.md; grpolab.measure.preflight)")
    preflight_budget: float = _key(
        60.0, "time the preflight before RL may take (never overrun)", form=">= 0 seconds (0 = no limit)",
        more=("seconds the preflight before RL may take (0 = no limit); never overrun: the first chunk is one "
              "item and no chunk is started that would end past it, so a slow model gets fewer items (and more "
              "\"can't tell\" verdicts), not a long wait"))
    eval_every: int = _key(25, "steps between held-out greedy evaluations", form="> 0")
    save_every: int = _key(25, "steps between checkpoints", form="> 0")
    keep_checkpoints: int = _key(2, "checkpoints kept", form="> 0")
    seed: int = _key(0, "seed of data, sampling and initialisation")
    run_dir: str = _key("runs/default", "where the run writes everything", form="a directory (not a file)")

    def validate(self) -> None:
        if not str(self.run_dir).strip():
            raise ConfigError("trainer.run_dir is empty; set trainer.run_dir=PATH (e.g. runs/default)")
        if Path(self.run_dir).exists() and not Path(self.run_dir).is_dir():
            raise ConfigError(f"trainer.run_dir={str(self.run_dir)!r} is a file, not a directory; give a new or "
                              "existing run directory")
        for k in ("steps", "epochs", "mini_batches", "eval_every", "save_every", "keep_checkpoints"):
            _positive(f"trainer.{k}", getattr(self, k))
        for k in ("micro_batch_size", "micro_batch_tokens", "policy_lag"):
            _positive(f"trainer.{k}", getattr(self, k), zero_ok=True)
        if not 0 <= self.seed < 2**32:  # numpy's seed range: a larger or negative one fails at the run's start
            raise ConfigError(f"trainer.seed={self.seed} must be in [0, 2**32 - 1] (numpy's seed range)")
        if self.policy_lag >= self.steps:
            raise ConfigError(f"trainer.policy_lag={self.policy_lag} is not below trainer.steps={self.steps}: no "
                              "update would ever use a lagged policy; lower it (0 = on-policy)")
        b = self.preflight_budget
        if isinstance(b, bool) or not isinstance(b, (int, float)) or not b >= 0 or b == float("inf"):
            raise ConfigError(f"trainer.preflight_budget={b!r} must be a number of seconds >= 0 (0 = no limit), "
                              "e.g. --set trainer.preflight_budget=120")


@dataclass
class LogConfig:
    """Logging and the training warnings. Each key's help is on its field (``grpolab config log``)."""

    tensorboard: bool = _key(True, "write TensorBoard event files (RUN_DIR/tb)")
    wandb: bool = _key(False, "log to Weights & Biases (needs the wandb package)",
                       more="the package is checked when the config is built")
    wandb_project: str = _key("grpolab", "wandb project")
    wandb_entity: str = _key("", "wandb entity")
    wandb_run_name: str = _key("", "wandb run name")
    wandb_mode: str = _key("online", "wandb mode", more="entity, run name and mode are passed to wandb.init")
    progress: bool = _key(True, "progress bar on a terminal, progress lines in a log file")
    plots: bool = _key(True, "PNG plots in RUN_DIR/plots at the end")
    completions_every: int = _key(
        10, "steps between sampled completions in completions.jsonl (0 = off)", form=">= 0",
        more=("every N steps completions_n sampled completions (prompt, completion, reward) go to "
              "RUN_DIR/completions.jsonl and TensorBoard text, like TRL's log_completions"))
    completions_n: int = _key(4, "completions written each time", form="> 0")
    metric_names: str = _key(
        "grpolab", "grpolab's metric names only, or with verl-style aliases",
        more=("both adds the verl-style aliases of docs/real-models.md (actor/pg_clipfrac, response_length/mean, "
              "...; 25 more keys per row, opt-in since they duplicate the row)"))
    progress_every: int = _key(
        0, "steps between progress lines in a log file (0 = ~20 per run)", form=">= 0",
        more=("With log.progress on and stderr not a terminal (a log file): one progress line every this many "
              "steps, with the rate and an ETA (0 = about 20 lines per run)."))
    warn_no_signal_steps: int = _key(
        5, "warn after this many steps in a row without a group with signal (0 = never)", form=">= 0",
        more=("Training warnings (grpolab.train.watch): a line when this many consecutive steps had no prompt "
              "group with reward variance (0 = never), and when more than log.warn_truncated_frac of a step's "
              "responses hit the length cap after this many first steps (within them: one note; 5 when this is "
              "0). A step whose every verifier call failed always warns."))
    warn_truncated_frac: float = _key(
        0.5, "warn when more than this share of responses is truncated (1 = never)", form="(0, 1]")

    def validate(self) -> None:
        _positive("log.warn_no_signal_steps", self.warn_no_signal_steps, zero_ok=True)
        _positive("log.progress_every", self.progress_every, zero_ok=True)
        if not 0 < self.warn_truncated_frac <= 1:
            raise ConfigError(f"log.warn_truncated_frac={self.warn_truncated_frac} must be in (0, 1] "
                              "(1 = never warn; e.g. 0.5)")
        _choice("log.wandb_mode", self.wandb_mode)
        _choice("log.metric_names", self.metric_names)
        _positive("log.completions_every", self.completions_every, zero_ok=True)
        _positive("log.completions_n", self.completions_n)
        if self.wandb:
            import importlib.util

            if importlib.util.find_spec("wandb") is None:
                raise ConfigError("log.wandb=true but the wandb package is not installed; "
                                  "pip install 'grpolab[wandb]' or set log.wandb=false")


@dataclass
class CreditConfig:
    """Token-level credit from a privileged self-teacher (RLSD, GEAR, OPSD); see docs/credit.md.

    The one credit settings schema: grpolab's own trainer reads it as the ``credit`` section, the
    TRL adapter as its ``grpolab_credit_<field>`` arguments and the verl extension as its
    ``grpolab.credit.<field>`` keys -- same names, same defaults, one :meth:`validate`
    (:meth:`from_mapping` builds it from an adapter's keys; docs/credit.md, "One schema"). Each
    key's help is on its field (``grpolab config credit``; the TRL adapter's argument help).
    """

    name: str = _key("grpo", "token credit from a privileged self-teacher (grpo = no credit; docs/credit.md)",
                     more="grpo: every token keeps its sequence advantage")
    lam: float = _key(0.5, "teacher weight at the start", form="[0, 1]")
    lam_end: float = _key(0.0, "teacher weight after lam_steps", form="[0, 1]")
    lam_steps: int = _key(50, "steps of the lam schedule", form=">= 0")
    lam_schedule: str = _key("linear", "how lam moves from lam to lam_end",
                             more="linear: from lam to lam_end over lam_steps steps; constant: stays lam")
    eps_w: float = _key(0.2, "clip of the per-token multiplier: [1 - eps_w, 1 + eps_w]", form="[0, 1)")
    negative_only: bool = _key(False, "reweight only negative-advantage rows")
    span_end: str = _key("", "reweight only tokens before the first token containing this text",
                         more="e.g. '#': the scratchpad of the arith task")
    teacher: str = _key("frozen", "frozen copy re-synced every teacher_sync_every steps, or the live policy",
                        more="frozen: a copy of the policy; live: the policy itself")
    teacher_sync_every: int = _key(
        10, "steps between syncs of the frozen teacher (0: never, the initial policy)", form=">= 0")
    template: str = _key(
        DEFAULT_TEACHER_TEMPLATE, "the teacher's plain-text prompt", form="text with {prompt} and {privileged}")
    privileged_placement: str = _key(
        "user", "where the privileged context goes in a chat prompt",
        more=("Chat-template prompts: the privileged context goes into the conversation, not around the rendered "
              "text. placement \"user\": the last user turn becomes chat_template (with {prompt} = that turn); "
              "\"system\": system_template is added as (or to) the system message."))
    chat_template: str = _key(
        DEFAULT_CHAT_TEACHER_TEMPLATE, "the teacher's last user turn (chat)",
        form="text with {prompt} and {privileged}")
    system_template: str = _key(
        DEFAULT_SYSTEM_TEACHER_TEMPLATE, "the teacher's system message (chat, placement system)",
        form="text with {privileged}")
    divergence: str = _key("kl", "GEAR's per-token divergence",
                           more="kl: the full vocabulary's; logratio: the sampled token's gap")
    gear_threshold: str = _key("mad", "GEAR's spike threshold rule",
                               more="mad: median + gear_k MAD; quantile: gear_quantile; floor gear_min_divergence")
    gear_k: float = _key(3.0, "MADs above the median for a spike (gear_threshold=mad)", form=">= 0")
    gear_quantile: float = _key(0.9, "quantile for a spike (gear_threshold=quantile)", form="[0, 1]")
    gear_min_divergence: float = _key(0.0, "floor of the spike threshold", form=">= 0")
    gear_anchor: str = _key("departure", "GEAR's anchor rule",
                            more="departure: a spike where the teacher gives the sampled token less than "
                                 "exp(-gear_min_drop) of the student's probability; spike: the spike alone "
                                 "(the rule before issue 44; docs/credit.md, GEAR's anchors)")
    gear_min_drop: float = _key(0.6931471805599453, "log-probability drop (student - teacher) that makes a "
                                "spike a departure (gear_anchor=departure; ln 2 = half the probability)",
                                form=">= 0")
    gear_boundaries: str = _key("\n;", "characters whose tokens end a GEAR segment")
    chunk_size: int = _key(1024, "positions per chunk of the full-vocabulary KL", form="> 0")
    micro_batch_size: int = _key(
        0, "rows per teacher forward (0 = trainer's, or all)", form=">= 0",
        more="0 = trainer.micro_batch_size, or all rows")

    @property
    def enabled(self) -> bool:
        """False for ``name=grpo`` (no credit)."""
        return self.name != "grpo"

    @property
    def segment_boundaries(self) -> str:
        """The characters whose tokens end a GEAR segment; ``""`` for the methods without segments
        (which then skip the vocabulary scan of :class:`grpolab.teacher_text.CreditTokens`)."""
        return self.gear_boundaries if self.name == "gear" else ""

    @property
    def scores_all_rows(self) -> bool:
        """True when every row goes through the teacher (``opsd`` ignores the reward); the other
        methods score only the rows whose advantage is non-zero (a zero advantage stays zero)."""
        return self.name == "opsd"

    def validate(self, prefix: str = "credit.") -> "CreditConfig":
        """Raise :class:`ConfigError` naming the key (``prefix`` + field: ``credit.lam``,
        ``grpolab_credit_lam``, ``grpolab.credit.lam``) and the fix. Returns ``self``."""
        from grpolab import objectives as obj
        from grpolab.teacher_text import check_template

        for f in ("name", "lam_schedule", "teacher", "privileged_placement", "divergence", "gear_threshold",
                  "gear_anchor"):
            _choice(prefix + f, getattr(self, f), CHOICES[f"credit.{f}"]())
        for k in ("lam", "lam_end"):
            if not 0 <= getattr(self, k) <= 1:
                raise ConfigError(f"{prefix}{k}={getattr(self, k)} must be in [0, 1] (0 = plain GRPO)")
        for k in ("lam_steps", "teacher_sync_every", "micro_batch_size", "gear_min_divergence", "gear_k",
                  "gear_min_drop"):
            _positive(prefix + k, getattr(self, k), zero_ok=True)
        if not math.isfinite(self.gear_min_drop):
            raise ConfigError(f"{prefix}gear_min_drop={self.gear_min_drop!r} must be a finite number >= 0 "
                              "(0.693 = ln 2)")
        for k, hi in (("eps_w", "1)"), ("gear_quantile", "1]")):  # the key named, not objectives' argument
            v = getattr(self, k)
            if not (0 <= v < 1 if hi == "1)" else 0 <= v <= 1):
                raise ConfigError(f"{prefix}{k}={v!r} must be in [0, {hi}")
        _positive(prefix + "chunk_size", self.chunk_size)
        for k in ("span_end", "gear_boundaries"):
            if not isinstance(getattr(self, k), str):
                raise ConfigError(f"{prefix}{k}={getattr(self, k)!r} must be a string of characters")
        try:
            obj.check_credit(name=self.name, lam=self.lam, eps_w=self.eps_w, threshold=self.gear_threshold,
                             k=self.gear_k, quantile=self.gear_quantile, divergence=self.divergence)
            check_template(self.template)
            check_template(self.chat_template)
            check_template(self.system_template, need_prompt=False)
        except ValueError as e:
            raise ConfigError(f"{prefix.rstrip('._')}: {e}") from None
        return self

    @classmethod
    def from_mapping(cls, values: typing.Mapping[str, Any], *, prefix: str = "credit.") -> "CreditConfig":
        """Build and validate from ``{field: value}`` (an adapter's keys with its prefix removed).

        Raises:
            ConfigError: an unknown key (naming the closest field and every allowed one) or a bad value.
        """
        import difflib

        names = [f.name for f in dataclasses.fields(cls)]
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(str(key), names, n=1)
                hint = f"did you mean {prefix}{close[0]}? " if close else ""
                raise ConfigError(f"unknown credit key {prefix}{key}; {hint}allowed: {', '.join(names)}")
        return cls(**dict(values)).validate(prefix)

    def lam_at(self, step: int) -> float:
        """``lam`` at 0-based training ``step`` (the ``lam`` / ``lam_end`` / ``lam_steps`` schedule)."""
        from grpolab.objectives import lam_schedule

        return lam_schedule(step, start=self.lam, end=self.lam_end, steps=self.lam_steps, kind=self.lam_schedule)

    def teacher_prompt(self):
        """The teacher prompt's settings (:class:`grpolab.teacher_text.TeacherPrompt`)."""
        from grpolab.teacher_text import TeacherPrompt

        return TeacherPrompt(template=self.template, chat_template=self.chat_template,
                             system_template=self.system_template, placement=self.privileged_placement)

    def needs_kl(self) -> bool:
        """Whether the teacher forward must return the full-vocabulary KL (GEAR with ``divergence=kl``)."""
        return self.name == "gear" and self.divergence == "kl"

    def method_kwargs(self) -> dict[str, Any]:
        """The method's settings as :func:`grpolab.objectives.credit_advantages` takes them."""
        return dict(eps_w=self.eps_w, negative_only=self.negative_only, threshold=self.gear_threshold,
                    k=self.gear_k, quantile=self.gear_quantile, min_divergence=self.gear_min_divergence,
                    anchor=self.gear_anchor, min_drop=self.gear_min_drop)


@dataclass
class EnvConfig:
    """Multi-turn episodes (:mod:`grpolab.envs`); ``name=""`` (default) means single-turn sampling.

    With ``name`` set, every rollout and evaluation plays episodes: the model acts (one turn ends
    at EOS, at most ``max_turn_tokens`` tokens), the environment answers, up to ``max_turns``
    model turns and ``max_total_tokens`` response tokens (model + observations) per episode.
    ``options`` go to the environment's constructor. The task section must produce items for
    that environment (e.g. ``task.name: web`` with ``env.name: web``); see docs/envs.md.
    """

    name: str = _key("", "multi-turn environment (docs/envs.md)", form="'' = single-turn")
    max_turns: int = _key(4, "model turns per episode at most", form="> 0")
    max_total_tokens: int = _key(160, "response tokens per episode (model + observations) at most", form="> 0")
    max_turn_tokens: int = _key(32, "tokens per model turn at most", form="> 0, <= max_total_tokens")
    options: dict[str, Any] = _key(default_factory=dict, meaning="the environment's constructor options")

    def validate(self) -> None:
        for k in ("max_turns", "max_total_tokens", "max_turn_tokens"):
            _positive(f"env.{k}", getattr(self, k))
        if not isinstance(self.options, dict):
            raise ConfigError(f"env.options must be a mapping, got {type(self.options).__name__}")
        if self.max_turn_tokens > self.max_total_tokens:
            raise ConfigError(
                f"env.max_turn_tokens={self.max_turn_tokens} exceeds env.max_total_tokens="
                f"{self.max_total_tokens}; lower the first or raise the second"
            )
        if self.name:
            from grpolab.envs import list_envs

            if self.name not in list_envs():
                raise ConfigError(f"env.name={self.name!r} is not allowed; choose one of: {', '.join(list_envs())} "
                                  "(or leave it empty for single-turn sampling)")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    log: LogConfig = field(default_factory=LogConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    env: EnvConfig = field(default_factory=EnvConfig)

    def validate(self) -> "Config":
        for f in dataclasses.fields(self):  # one check for every number: NaN and inf are never valid
            section = getattr(self, f.name)
            for g in dataclasses.fields(section):
                v = getattr(section, g.name)
                if isinstance(v, float) and not math.isfinite(v):
                    raise ConfigError(f"{f.name}.{g.name}={v!r} must be a finite number")
        for f in dataclasses.fields(self):
            getattr(self, f.name).validate()
        n_groups = self.rollout.prompts_per_step
        if self.trainer.mini_batches > n_groups:
            raise ConfigError(
                f"trainer.mini_batches={self.trainer.mini_batches} exceeds rollout.prompts_per_step="
                f"{n_groups}: mini-batches are split along prompt groups; lower trainer.mini_batches"
            )
        if self.task.n_train is not None and self.rollout.prompts_per_step > self.task.n_train:
            raise ConfigError(
                f"rollout.prompts_per_step={self.rollout.prompts_per_step} exceeds task.n_train="
                f"{self.task.n_train}: raise task.n_train or lower rollout.prompts_per_step"
            )
        if (self.env.name == "miniwob") != (self.task.name == "miniwob"):
            raise ConfigError(
                f"env.name={self.env.name!r} with task.name={self.task.name!r}: real MiniWoB++ pages need "
                "both set to miniwob (the task makes the seeded pages, the environment plays them); "
                "see docs/miniwob.md"
            )
        if self.env.name and "reward" in self.task.options:
            raise ConfigError(
                f"task.options.reward is not used with env.name={self.env.name!r}: the environment "
                "scores each episode; remove task.options.reward (or env.name for single-turn runs)"
            )
        if self.objective.aggregation == "balanced" and self.rollout.group_size < 2:
            raise ConfigError("objective.aggregation=balanced needs rollout.group_size >= 2")
        if self.env.name and (self.rollout.top_k or self.rollout.min_p or self.rollout.repetition_penalty != 1):
            raise ConfigError("rollout.top_k / rollout.min_p / rollout.repetition_penalty apply to single-turn "
                              f"sampling only; with env.name={self.env.name!r} leave them at 0, 0 and 1")
        if self.rollout.dynamic_sampling and self.rollout.group_size < 2:
            raise ConfigError("rollout.dynamic_sampling needs rollout.group_size >= 2 (a one-sample group never "
                              "has signal, so every group would be dropped)")
        max_len = self.env.max_total_tokens if self.env.name else self.rollout.max_new_tokens
        if self.objective.overlong_buffer >= 1 and self.objective.overlong_buffer > max_len:
            raise ConfigError(
                f"objective.overlong_buffer={int(self.objective.overlong_buffer)} tokens exceeds the longest "
                f"response ({max_len}, {'env.max_total_tokens' if self.env.name else 'rollout.max_new_tokens'}); "
                "lower it, or give a share such as 0.2")
        if self.rollout.group_size < 2 and self.objective.advantage in ("grpo", "drgrpo", "rloo"):
            raise ConfigError(
                f"rollout.group_size={self.rollout.group_size}: group advantages need at least 2 "
                "samples per prompt (every advantage would be 0); set rollout.group_size >= 2"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


PRESETS: dict[str, dict[str, Any]] = {
    "grpo": {},
    # DAPO as its published recipe runs it (verl recipe/dapo): token-mean aggregation, clip-higher
    # [0.2, 0.28], dynamic sampling, soft overlong punishment over the last 20% of the length
    # (4096 of 20480 tokens), no KL. Overlong filtering (objective.mask_truncated) stays off: the
    # soft punishment replaces it there.
    "dapo": {"objective.aggregation": "token", "objective.clip_low": 0.2, "objective.clip_high": 0.28,
             "objective.advantage": "grpo", "objective.kl_coef": 0.0, "rollout.dynamic_sampling": True,
             "objective.overlong_buffer": 0.2, "objective.overlong_penalty": 1.0},
    "drgrpo": {"objective.advantage": "drgrpo", "objective.aggregation": "constant"},
    "ba": {"objective.aggregation": "balanced"},
    "gspo": {"objective.ratio": "gspo", "objective.clip_low": 3e-4, "objective.clip_high": 4e-4},
    "ctpo": {
        "objective.ratio": "cumulative", "objective.clip_low": 0.025, "objective.clip_high": 0.05,
        "objective.clip_power": 0.5,
    },
    # for ratio studies: one name per variant
    "token": {"objective.ratio": "token"},
    "sequence": {"objective.ratio": "sequence"},
    "ctpo_fixed": {  # cumulative ratio with a position-independent bound (clip_power 0)
        "objective.ratio": "cumulative", "objective.clip_low": 0.025, "objective.clip_high": 0.05,
        "objective.clip_power": 0.0,
    },
}


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Convert ``value`` (from YAML or a ``--set`` string) to the annotated type ``tp``."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        # "all" reads as None for the optional counts (task.n_train=all: every row)
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "all")):
            if type(None) in args:
                return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(key, value, inner[0])
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "yes", "1", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "no", "0", "off"):
            return False
        raise ConfigError(f"{key}={value!r} must be a boolean (true/false)")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: {_yaml_bool(value)} must be a number")
        try:
            out = tp(value) if not isinstance(value, str) else tp(float(value) if tp is float else int(value))
        except (TypeError, ValueError):
            raise ConfigError(f"{key}={value!r} must be {'an integer' if tp is int else 'a number'}") from None
        if tp is int and isinstance(value, float) and not value.is_integer():
            raise ConfigError(f"{key}={value!r} must be an integer")
        return out
    if tp is str:
        if isinstance(value, bool) and key in _BOOLEAN_WORDS:
            # YAML 1.1 reads an unquoted yes/no/on/off/true/false as a boolean
            return _BOOLEAN_WORDS[key][0 if value else 1]
        if isinstance(value, bool):
            raise ConfigError(f"{key}: {_yaml_bool(value)} must be a string; quote the value "
                              f"(e.g. {key.split('.')[-1]}: 'text')")
        if not isinstance(value, (str, int, float)):
            raise ConfigError(f"{key}={value!r} must be a string")
        return str(value)
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = _yaml_value(key, value)
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return value
    return value


def _yaml_bool(value: bool) -> str:
    """How to name a boolean that reached a number or text setting: the user wrote yes/no/on/off
    (or true/false) unquoted in YAML, not the ``True`` Python prints."""
    words = "yes/on/true" if value else "no/off/false"
    return f"the value {words} (YAML reads an unquoted {words} as a boolean)"


# String settings with a yes/no (on/off) choice, and the words a YAML boolean there stands for:
# ``enabled: no`` and ``chat_template: on`` reach the coercer as False and True.
_BOOLEAN_WORDS = {"sft.enabled": ("yes", "no"), "task.chat_template": ("on", "off")}


#: Keys renamed before the first release: an old key is refused with one error naming the new one.
_RENAMED_KEYS = {"trainer.headroom": "trainer.preflight", "trainer.headroom_budget": "trainer.preflight_budget"}


def _set(cfg: Config, dotted: str, value: Any) -> None:
    if dotted in _RENAMED_KEYS:
        raise ConfigError(f"{dotted} is now {_RENAMED_KEYS[dotted]} (the headroom check became the preflight); "
                          f"write {_RENAMED_KEYS[dotted]}={value}")
    parts = dotted.split(".")
    sections = {f.name: f for f in dataclasses.fields(Config)}
    if parts[0] not in sections:
        raise ConfigError(f"unknown config section {parts[0]!r} in {dotted!r}; sections: {', '.join(sections)}")
    section = getattr(cfg, parts[0])
    hints = typing.get_type_hints(type(section))
    if len(parts) == 3 and parts[1] == "options" and isinstance(getattr(section, "options", None), dict):
        section.options[parts[2]] = _yaml_value(dotted, value) if isinstance(value, str) else value
        return
    hints = {f.name: hints[f.name] for f in dataclasses.fields(section)}  # settings, not class constants
    if len(parts) != 2 or parts[1] not in hints:
        names = ", ".join(f"{parts[0]}.{k}" for k in hints)
        raise ConfigError(f"unknown config key {dotted!r}; {parts[0]} has: {names}")
    setattr(section, parts[1], _coerce(dotted, value, hints[parts[1]]))


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and not key.endswith("options") and prefix == "":
            out.update(_flatten(v, f"{key}."))
        else:
            out[key] = v
    return out


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML would keep the last silently)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _value in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {key!r} is given twice (line {key_node.start_mark.line + 1}); keep one",
                key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def _yaml_value(key: str, text: str) -> Any:
    """A ``--set`` value (or a ``--design`` entry) parsed as YAML; malformed YAML is one :class:`ConfigError`."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{key}={text!r} is not valid YAML ({_one_line(e)}); quote it or fix the brackets") from None


def parse_yaml_text(text: str, what: str) -> Any:
    """YAML text (a config file's, ``what`` names it): one :class:`ConfigError` line for malformed YAML
    or a key given twice."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise ConfigError(f"{what} is not valid YAML: {_one_line(e)}") from None


def read_text_file(p: Path, what: str) -> str:
    """The UTF-8 text of ``p``; another encoding or a binary file is one :class:`ConfigError`."""
    try:
        return p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it "
                          "as UTF-8 (a YAML file of sections: model, task, ...)") from None


def _read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    what = f"config file {str(p)!r}"
    if not p.is_file():
        raise ConfigError(f"{what} not found")
    text = read_text_file(p, what)
    loaded = parse_yaml_text(text, what)
    if loaded is None:
        raise ConfigError(f"{what} is empty (no settings); give a file with sections such as `trainer: {{steps: 50}}`, "
                          "or leave the file out to use the defaults")
    if not isinstance(loaded, dict):
        raise ConfigError(f"{what} must hold a mapping of sections")
    return loaded


def _override_items(overrides: list[str] | dict[str, Any] | None) -> dict[str, Any]:
    if isinstance(overrides, dict):
        return dict(overrides)
    items: dict[str, Any] = {}
    for ov in overrides or []:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r} must look like section.key=value")
        k, v = ov.split("=", 1)
        items[k.strip()] = v
    return items


def load_config(
    path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> Config:
    """Build a validated :class:`Config` from an optional YAML file, a ``preset``, and overrides.

    The YAML file has one mapping per section (``objective: {aggregation: balanced}``) and may name
    ``preset: ctpo``. Overrides are ``"section.key=value"`` strings (or a dict); they win over the file.
    """
    cfg = Config()
    data = _read_yaml(path) if path is not None else {}
    preset = data.pop("preset", None)
    items = _override_items(overrides)
    preset = items.pop("preset", preset)
    if preset is not None:
        _choice("preset", preset, list(PRESETS))
        for k, v in PRESETS[preset].items():
            _set(cfg, k, v)
    _set_from_file(cfg, path, _flatten(data))
    for k, v in items.items():
        _set(cfg, k, v)
    return cfg.validate()


def _set_from_file(cfg: Config, path: str | Path | None, values: dict[str, Any]) -> None:
    """``_set`` each key of a YAML file; an unknown section or key, or a bad value, names the file."""
    for k, v in values.items():
        try:
            _set(cfg, k, v)
        except ConfigError as e:
            raise ConfigError(f"config file {str(path)!r}: {e}") from None


def merge_config(
    base: Config, path: str | Path | None = None, overrides: list[str] | dict[str, Any] | None = None
) -> Config:
    """``base`` with a YAML file and overrides applied on top (precedence: base < file < overrides).

    Used by ``grpolab train --resume RUN_DIR [FILE] [--set ...]``: the saved config is the base.
    A ``preset`` in the file or the overrides applies before the file's own values.
    """
    data = _read_yaml(path) if path is not None else {}
    items = _override_items(overrides)
    preset = items.pop("preset", data.pop("preset", None))
    merged: dict[str, Any] = {}
    if preset is not None:
        _choice("preset", preset, list(PRESETS))
        merged.update(PRESETS[preset])
    _set_from_file(Config(), path, _flatten(data))  # a file's unknown key names the file
    merged.update(_flatten(data))
    merged.update(items)
    return load_config(overrides={**_flatten(base.to_dict()), **merged})


def config_from_dict(d: dict[str, Any]) -> Config:
    """Rebuild a config saved with :meth:`Config.to_dict` (e.g. from a run directory)."""
    return load_config(overrides=_flatten(d))
