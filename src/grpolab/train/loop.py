"""The training loop: collect -> advantages (+ credit) -> update -> evaluate -> log -> checkpoint.

:func:`train` is one straight loop over the trainer's nouns:

- :class:`~grpolab.train.rundir.RunDir` owns the run directory (config, warm-start cache,
  checkpoints, final model);
- :class:`~grpolab.train.state.TrainState` holds everything a checkpoint must hold;
- a :class:`~grpolab.rollout.collector.Collector` (single-turn or multi-turn episodes) turns the
  sampler and a step's prompts into a scored :class:`~grpolab.rollout.experience.Experience`;
- :func:`~grpolab.train.policy_update.update` makes ``trainer.epochs x trainer.mini_batches`` exact
  optimizer steps over it.

Everything interchangeable (advantage estimator, ratio level, aggregation, KL estimator, task,
reward, credit method) comes from a registry chosen by the config. Batch structure per step:
``rollout.prompts_per_step`` prompts x ``rollout.group_size`` samples.
"""

from __future__ import annotations

import random
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from grpolab import objectives as obj
from grpolab import step_row as K
from grpolab.config import Config
from grpolab.models import stop_token_ids
from grpolab.rewards.user_worker import set_isolation
from grpolab.rollout import response_logprobs
from grpolab.train.checkpoint import save_checkpoint
from grpolab.rollout.collector import Collector, collector_for
from grpolab.train.diskspace import check_free_space, checkpoint_bytes, disk_full_named, model_bytes
from grpolab.train.step_batch import collect_step, without_truncated
from grpolab.train.watch import TrainingWatch, memory_metrics
from grpolab.measure.evaluate import evaluate, per_family
from grpolab.rollout.experience import Experience
from grpolab.train.memory_check import ModelDims, check_memory
from grpolab.train.metrics_log import MetricsLog, keep_rows_through
from grpolab.train.report import write_report
from grpolab.train.rundir import RunDir
from grpolab.train.completions import append_jsonl, completion_rows, examples_table
from grpolab.train.setup import (
    build_policy,
    model_context,
    build_task_splits,
    prepare_policy,
    record_sandbox_isolation,
    refuse_float16,
    resolve_device,
    resolve_prompt_format,
    save_final,
    trainable_dtype,
)
from grpolab.train.nonfinite import NonFiniteError, at_step
from grpolab.errors import Interrupted
from grpolab.train.signals import StopSignals, stop_signals
from grpolab.train.state import TrainState
from grpolab.train.step_metrics import metric_schema, step_metrics
from grpolab.train.warm_start import warm_start, warm_start_status
from grpolab.train.policy_update import UpdateSpec, auto_micro_batch_tokens, update
from grpolab.utils.heap import bound_heap


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    start_accuracy: float  # greedy held-out accuracy before RL (after any warm start)
    final_accuracy: float
    best_accuracy: float
    seconds: float
    # held-out greedy success per task family before RL and at the end:
    # {family: {"accuracy", "solved", "n"}} (empty when the items have no family label)
    start_families: dict = field(default_factory=dict)
    final_families: dict = field(default_factory=dict)
    n_eval: int = 0  # held-out items of each greedy evaluation


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class PhaseTimer:
    """Wall time of named phases: ``with timer("update"): ...``; ``timer.seconds`` maps name -> s."""

    def __init__(self) -> None:
        self.start = time.time()
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Phase:
            def __enter__(self):
                self.t0 = time.time()

            def __exit__(self, *exc):
                timer.seconds[name] = timer.seconds.get(name, 0.0) + time.time() - self.t0

        return _Phase()

    def total(self) -> float:
        return time.time() - self.start


def train(cfg: Config, *, resume: bool = False, overwrite: bool = False,
          log: Callable[[str], None] = print) -> TrainResult:
    """Run RL training as configured.

    ``resume=True`` continues from the run directory's last checkpoint; ``overwrite=True`` starts
    over in a run directory that holds a previous run (its outputs are deleted only once the new
    config's model and data have loaded; the cached warm start is kept if it was built with the
    same settings).

    The run directory is claimed first (:meth:`RunDir.claim`): a folder that is not empty and was
    not created by grpolab is refused, and so is one another process trains in (its pid named).
    A stop signal (Ctrl-C, SIGTERM, SIGHUP) ends the run with a checkpoint of its last completed
    step (:mod:`grpolab.train.signals`), so that ``--resume`` replays nothing.
    """
    run_dir = RunDir(cfg.trainer.run_dir)
    lock = run_dir.claim(resume=resume)  # the marker file and the exclusive lock: one writer per run
    set_isolation(cfg.rollout.user_reward_process)  # the config's own rewards in a worker process, if asked
    try:
        # SIGTERM and SIGHUP stop the run like Ctrl-C; a full disk is named (grpolab.train.signals, .diskspace)
        with stop_signals() as stops, disk_full_named(run_dir.path):
            return _train(cfg, run_dir, stops, resume=resume, overwrite=overwrite, log=log)
    except BaseException:
        lock.release()
        run_dir.discard_unused_claim()  # refused before any work: leave no folder behind
        raise
    finally:
        set_isolation(False)
        lock.release()


@dataclass
class _Steps:
    """What every RL step of one training process uses (built once by :func:`_train`)."""

    cfg: Config
    run_dir: RunDir
    state: TrainState
    collector: Collector
    train_items: list
    eval_items: list
    metrics_log: MetricsLog
    progress: object
    watch: TrainingWatch
    warn: Callable[[str], None]
    stops: StopSignals
    spec: UpdateSpec
    advantage_fn: Callable
    earlier: float  # wall time of the processes before this one (resumed runs)
    t_start: float
    saved_step: int = -1  # the step of the checkpoint this process wrote last

    def seconds(self) -> float:
        return self.earlier + time.time() - self.t_start

    def save(self, before_sampling: dict | None = None) -> None:
        """The checkpoint of the last completed step (with ``before_sampling``: as it was before
        the abandoned step's sampling; :meth:`TrainState.sampling_marks`)."""
        state = self.state
        state.seconds = self.seconds()
        save_checkpoint(self.run_dir.path, state.step, state.policy, state.tokenizer,
                        state.state_dict(before_sampling), keep=self.cfg.trainer.keep_checkpoints)
        self.saved_step = state.step


def _train(cfg: Config, run_dir: RunDir, stops: StopSignals, *, resume: bool, overwrite: bool,
           log: Callable[[str], None]) -> TrainResult:
    t_start = time.time()
    bound_heap()  # freed tensors leave the process: no GiB of free heap held (grpolab.utils.heap)
    state, eval_items, train_items = start_run(cfg, run_dir, resume=resume, overwrite=overwrite, log=log)
    collector = collector_for(cfg, state.tokenizer, prompt_format=state.prompt_format, stop_ids=state.stop_ids)
    if state.step == 0:
        evaluate_start(state, collector, eval_items, cfg, run_dir, log=log)
    resume_step = state.step if resume and state.step > 0 else None
    metrics_log = MetricsLog(run_dir.path, tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb,
                             wandb_project=cfg.log.wandb_project, wandb_entity=cfg.log.wandb_entity,
                             wandb_run_name=cfg.log.wandb_run_name, wandb_mode=cfg.log.wandb_mode,
                             config=cfg.to_dict(), resume_step=resume_step, schema=metric_schema(cfg))
    # the completions of the steps a resumed run replays are written once (its later rows are dropped)
    broken = {"metrics.jsonl": metrics_log.dropped_lines,
              "completions.jsonl": keep_rows_through(run_dir.path / "completions.jsonl", resume_step)}
    for name, n in broken.items():
        if n:
            log(f"note: dropped {n} half-written line(s) of {run_dir.path / name} (a process killed while "
                "writing it); the steps they belonged to run again")
    spec = UpdateSpec.from_config(cfg)
    if spec.micro_batch_size == 0 and spec.micro_batch_tokens == 0:
        log(f"update micro-batches: up to {auto_micro_batch_tokens(state.policy)} padded tokens "
            "(trainer.micro_batch_tokens=0: auto, about 1 GiB of activations on CPU; set it to override)")
    run = _Steps(cfg=cfg, run_dir=run_dir, state=state, collector=collector, train_items=train_items,
                 eval_items=eval_items, metrics_log=metrics_log, progress=_progress(cfg, initial=state.step, log=log),
                 watch=TrainingWatch(no_signal_steps=cfg.log.warn_no_signal_steps,
                                     truncated_frac=cfg.log.warn_truncated_frac,
                                     max_new_tokens=cfg.rollout.max_new_tokens, run_dir=str(run_dir.path)),
                 warn=_warner(cfg, log), stops=stops, spec=spec,
                 advantage_fn=obj.get_advantage_estimator(cfg.objective.advantage),
                 earlier=state.seconds, t_start=t_start, saved_step=state.step)
    while state.step < cfg.trainer.steps:
        _step(run)
    run.progress.close()
    metrics_log.close()
    with stops.deferred("writing final/ and the report"):  # never a final/ without its summary.md
        result = finish_run(state, cfg, run_dir, seconds=run.seconds(), log=log, n_eval=len(eval_items))
    stops.raise_pending()
    return result


def _step(run: _Steps) -> None:
    """One RL step: sample (a stop signal abandons it: the last completed step's checkpoint is
    written), then update, log and checkpoint (a first stop signal lets them finish, then stops)."""
    cfg, state, tr = run.cfg, run.state, run.cfg.trainer
    timer = PhaseTimer()
    marks = None
    try:
        marks = state.sampling_marks()
        # one round of prompts, or DAPO's dynamic sampling (grpolab.train.step_batch)
        exp, sampling_metrics = collect_step(run.collector, state.sampler(),
                                             lambda n: state.next_prompts(run.train_items, n), cfg,
                                             n_train=len(run.train_items), generator=state.generator)
    except Interrupted:
        if state.step > run.saved_step:  # a second signal cuts this write short; the checkpoint before stands
            run.save(marks if marks is not None else state.sampling_marks())
        raise
    with run.stops.deferred(f"finishing step {state.step + 1} and writing its checkpoint"):
        _update_and_log(run, exp, sampling_metrics, timer)
        if state.step % tr.save_every == 0 or state.step == tr.steps:
            run.save()
    if run.stops.pending is not None:
        if state.step > run.saved_step:
            run.save()
        run.stops.raise_pending()


def _update_and_log(run: _Steps, exp: Experience, sampling_metrics: dict, timer: PhaseTimer) -> None:
    """The update of one sampled step, its metrics row, completions and evaluation."""
    cfg, state = run.cfg, run.state
    lr = state.scheduler.get_last_lr()[0]  # the rate this step's (first) optimizer step runs at, as TRL/verl log
    with timer("update"), nonfinite_stops(state.step + 1, run.run_dir):
        exp = learning_signal(exp, state, run.spec, run.advantage_fn)
        stats = update(state.policy, state.optimizer, state.scheduler,
                       without_truncated(exp) if cfg.objective.mask_truncated else exp, run.spec,
                       generator=state.generator)  # not the global stream, which evaluation draws from
    state.finish_step()
    row = K.checked({**step_metrics(exp, stats), **sampling_metrics, **exp.credit_metrics,
                     **exp.episode_metrics, K.LR: lr, **_throughput(exp, timer), **memory_metrics()})
    for line in run.watch.observe(state.step, row, exp.reward_error_example):  # a run that cannot learn says so
        run.warn(line)
    every = cfg.log.completions_every
    # what the model writes, like TRL's log_completions; and the step whose reward failing was
    # warned about, so that the completions.jsonl the warning names holds its rows
    if (every and state.step % every == 0) or run.watch.warned("errors", state.step):
        rows = completion_rows(exp.items, run.collector.prompt_texts(exp.items), exp.texts, exp.rewards.tolist(),
                               prompt_index=exp.prompt_index.tolist(), n=cfg.log.completions_n, step=state.step)
        append_jsonl(run.run_dir.path / "completions.jsonl", rows)
        run.metrics_log.text("completions", examples_table(rows), state.step)
    if state.step % cfg.trainer.eval_every == 0 or state.step == cfg.trainer.steps:
        row.update(evaluate_now(state, run.collector, run.eval_items, cfg))
    run.metrics_log.log(state.step, K.with_verl_names(row) if cfg.log.metric_names == "both" else row)
    # the figures of the step just finished, set before the line (or bar) for it is drawn
    run.progress.set_postfix(reward=f"{row[K.REWARD_MEAN]:.2f}", acc=f"{row[K.ACCURACY]:.2f}",
                             eval=f"{state.history['eval'][-1]['accuracy']:.2f}", step_s=f"{row[K.TIME_STEP]:.1f}")
    run.progress.update(1)


# ---------------------------------------------------------------------------------------------
# The pieces the loop calls.


def start_run(cfg: Config, run_dir: RunDir, *, resume: bool, overwrite: bool = False,
              log: Callable[[str], None] = print):
    """``(state, eval_items, train_items)``: model, data and state, fresh or from the last checkpoint.

    The run's ``config.yaml`` is written, and with ``overwrite`` the previous run deleted, only
    after the model and the data loaded (and, on resume, the checkpoint's weights), so a config
    that cannot run never destroys what a run directory holds. A fresh run writes it before its
    warm start, so that a killed warm start can be continued with ``--resume``. Temporary
    checkpoint folders left by a killed process are removed first.
    """
    if cfg.model.lora:  # before the model loads and the warm start runs, not after
        from grpolab.config import ConfigError
        from grpolab.models.lora import require_peft

        try:
            require_peft()
        except ImportError as e:
            raise ConfigError(str(e)) from None
    run_dir.clean_stale()
    ckpt = run_dir.latest_checkpoint() if resume else None
    if resume and ckpt is None:
        log(f"no checkpoint in {run_dir.path}; starting from step 0")
    saved_state = None
    if ckpt is not None:
        check_resume_steps(cfg, ckpt.step, run_dir)
        saved_state = ckpt.load_state()  # read first: a truncated state.pt stops the run before the model loads
    gen = seed_everything(cfg.trainer.seed)
    device = resolve_device(cfg.model.device)
    train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed, log=log)
    if len(train_items) < cfg.rollout.prompts_per_step:
        from grpolab.config import ConfigError

        raise ConfigError(f"rollout.prompts_per_step={cfg.rollout.prompts_per_step} exceeds the task's "
                          f"{len(train_items)} training items; lower it (--set rollout.prompts_per_step=N)")
    refuse_float16(cfg.model)
    policy, tokenizer, from_scratch = build_policy(cfg.model, seed=cfg.trainer.seed, device=device)
    policy = trainable_dtype(cfg.model, policy, log=log)
    # memory and disk before the warm start and step 0 (grpolab.train.memory_check, .diskspace)
    check_memory(cfg, ModelDims.from_config(policy.config, next(policy.parameters()).element_size()),
                 n_demos=sum(1 for it in train_items if it.demonstration), device=str(device))
    weights, trainable = model_bytes(policy, lora=bool(cfg.model.lora))
    keep = 0 if ckpt is not None else cfg.trainer.keep_checkpoints  # a resumed run's checkpoints are on disk already
    check_free_space(run_dir.path, checkpoint_bytes(weights, trainable, keep=keep), keep=cfg.trainer.keep_checkpoints)
    fmt = resolve_prompt_format(cfg, tokenizer, list(train_items) + list(eval_items), log=log,
                                context=model_context(policy))
    stop_ids = stop_token_ids(policy, tokenizer)
    if not stop_ids:
        log(f"warning: model.path={cfg.model.path} has no end-of-sequence token (no eos_token in its tokenizer, no "
            f"eos_token_id in generation_config.json): every response will run to rollout.max_new_tokens="
            f"{cfg.rollout.max_new_tokens}. Set the token that ends its answers as eos_token in the model's "
            "tokenizer_config.json (or eos_token_id in generation_config.json)")
    collector = collector_for(cfg, tokenizer, prompt_format=fmt, stop_ids=stop_ids)
    if overwrite and not resume:
        status, diffs = warm_start_status(run_dir.sft, cfg)
        if run_dir.start_over(keep_warm_start=status in ("match", "legacy")):  # say so only where it removed some
            log(f"--overwrite: removed the previous run's outputs in {run_dir.path}" +
                (f" and its warm start (built with other settings: {'; '.join(diffs[:3])})" if status == "differs"
                 else ""))
    if ckpt is None:
        # the config first: a warm start killed part-way is then continued by `--resume` (from its
        # in-progress checkpoint RUN_DIR/sft.partial) as well as by the same command run again
        run_dir.write_config(cfg)
        policy = warm_start(cfg, policy, tokenizer, from_scratch, train_items, eval_items, run_dir, log=log,
                            collector=collector)
        policy = prepare_policy(cfg.model, policy)  # LoRA adapters, after the warm start
    else:  # the checkpoint holds the weights: no warm start needed
        policy = prepare_policy(cfg.model, policy)
        ckpt.load_weights_into(policy)  # one tensor at a time: no second copy in memory
        run_dir.write_config(cfg)
    policy.to(device)
    record_sandbox_isolation(cfg, train_items + eval_items, run_dir.path, log=log)
    state = TrainState.create(cfg, policy, tokenizer, gen, prompt_format=fmt)
    if saved_state is not None:
        state.load_state_dict(saved_state)
        del saved_state
        log(f"resumed {run_dir.path} at step {state.step}")
    return state, eval_items, train_items


def check_resume_steps(cfg: Config, done: int, run_dir: RunDir) -> None:
    """Refuse resuming a run whose checkpoint is past ``trainer.steps`` (it would "finish" having
    done nothing); a run at exactly ``trainer.steps`` is finished (:func:`finished_run_message`)."""
    if done > cfg.trainer.steps:
        from grpolab.train.rundir import RunDirError

        raise RunDirError(
            f"--resume {run_dir.path}: the run is at step {done} but trainer.steps={cfg.trainer.steps}; to train on, "
            f"raise it (--set trainer.steps={done + max(1, cfg.trainer.steps)}); its model so far is in "
            f"{run_dir.final if (run_dir.final / 'config.json').exists() else run_dir.checkpoints}")


def finished_run_message(cfg: Config, run_dir: RunDir) -> str | None:
    """The line for resuming a run that already finished its ``trainer.steps`` (else None)."""
    ckpt = run_dir.latest_checkpoint()
    if ckpt is None or ckpt.step != cfg.trainer.steps or not (run_dir.final / "config.json").exists():
        return None
    return (f"{run_dir.path} already finished its {ckpt.step} steps (model in {run_dir.final}, report in "
            f"{run_dir.path / 'summary.md'}); nothing to do. To train on: grpolab train --resume {run_dir.path} "
            f"--set trainer.steps={2 * ckpt.step}")


def evaluate_start(state: TrainState, collector: Collector, eval_items, cfg: Config, run_dir: RunDir, *,
                   log: Callable[[str], None]) -> None:
    """Step 0: held-out greedy accuracy, and the preflight (``trainer.preflight``)."""
    start = _evaluate(state.policy, state.tokenizer, eval_items, cfg, collector)
    state.record_eval(0, start.accuracy, start.mean_reward, per_family(eval_items, start.scores))
    log(f"step 0  held-out greedy accuracy on {len(eval_items)} items: {start.accuracy:.3f}")
    if cfg.trainer.preflight:  # own generator: the training RNG streams are untouched
        from grpolab.measure.preflight import run_preflight_check

        run_preflight_check(state.policy, state.tokenizer, eval_items, cfg, run_dir.path, log=log,
                            collector=collector)


@contextmanager
def nonfinite_stops(step: int, run_dir: RunDir):
    """Re-raise a :class:`NonFiniteError` of ``step`` as the line naming the step and the last checkpoint."""
    try:
        yield
    except NonFiniteError as e:
        ckpt = run_dir.latest_checkpoint()
        raise at_step(e, step, str(ckpt.path) if ckpt is not None else None) from None


def learning_signal(exp: Experience, state: TrainState, spec: UpdateSpec, advantage_fn) -> Experience:
    """Advantages, behaviour and reference log-probs, and the credit step's per-token advantages."""
    rollout = exp.rollout
    device = rollout.response_mask.device
    advantages = advantage_fn(exp.learning_rewards, rollout.group_ids.cpu()).to(device)
    on_policy = state.behaviour is None and spec.on_policy
    sampler = state.behaviour if state.behaviour is not None else state.policy
    with torch.no_grad():
        # On-policy with one optimizer step, old = current logp detached: ratio exactly 1.
        old_logp = None if on_policy else _logprobs(sampler, rollout, spec)
        ref_logp = _logprobs(state.reference, rollout, spec) if state.reference is not None else None
    exp = exp.replace(advantages=advantages, old_logp=old_logp, ref_logp=ref_logp)
    if state.credit is None:
        return exp
    # a privileged self-teacher reweights each token (RLSD/GEAR/OPSD); on-policy the sampling
    # log-probs are the current policy's; with a lag the credit step recomputes them
    student_logp = (old_logp if old_logp is not None else rollout.sample_logp) if state.behaviour is None else None
    out = state.credit(state.step, state.policy, exp, student_logp=student_logp)
    return exp.replace(advantages=out.advantages, teacher_logp=out.teacher_logp, credit_metrics=out.metrics)


def evaluate_now(state: TrainState, collector: Collector, eval_items, cfg: Config) -> dict[str, float]:
    """Held-out greedy evaluation after a step; recorded in the state's history."""
    ev = _evaluate(state.policy, state.tokenizer, eval_items, cfg, collector)
    state.record_eval(state.step, ev.accuracy, ev.mean_reward, per_family(eval_items, ev.scores))
    return {K.EVAL_ACCURACY: ev.accuracy, K.EVAL_MEAN_REWARD: ev.mean_reward, K.EVAL_MEAN_LENGTH: ev.mean_length}


def finish_run(state: TrainState, cfg: Config, run_dir: RunDir, *, seconds: float,
               log: Callable[[str], None], n_eval: int = 0) -> TrainResult:
    """Save ``final/``, write the report, return the result."""
    save_final(cfg.model, state.policy, state.tokenizer, run_dir.final)
    evals = state.history["eval"]
    result = TrainResult(
        run_dir=run_dir.path, steps=state.step, start_accuracy=evals[0]["accuracy"],
        final_accuracy=evals[-1]["accuracy"], best_accuracy=max(e["accuracy"] for e in evals), seconds=seconds,
        start_families=evals[0].get("families", {}), final_families=evals[-1].get("families", {}), n_eval=n_eval,
    )
    fmt = state.prompt_format
    write_report(run_dir.path, cfg, result, plots=cfg.log.plots,
                 prompt_format=fmt.describe() if hasattr(fmt, "describe") else None)
    from grpolab.train.metrics_log import read_metrics
    from grpolab.train.watch import run_health

    health = run_health(read_metrics(run_dir.path), truncated_frac=cfg.log.warn_truncated_frac,
                        early_steps=cfg.log.warn_no_signal_steps)
    log(f"done: held-out greedy accuracy {result.start_accuracy:.3f} -> {result.final_accuracy:.3f} "
        f"({result.final_accuracy - result.start_accuracy:+.3f}, best {result.best_accuracy:.3f}"
        f"{f', {n_eval} items' if n_eval else ''}) in {result.seconds:.0f}s; report: {run_dir.path / 'summary.md'}")
    if health.headline():  # after the gains: what went wrong
        log("warning: " + health.headline().strip("*").removeprefix("Warning: "))
    return result


def _throughput(exp: Experience, timer: PhaseTimer) -> dict[str, float]:
    n_tokens = int(exp.rollout.response_mask.sum()) + int(exp.rollout.prompt_mask.sum())
    step_time = timer.total()
    return {K.TIME_STEP: step_time,
            K.TIME_ROLLOUT: exp.seconds.get("rollout", 0.0), K.TIME_REWARD: exp.seconds.get("reward", 0.0),
            K.TIME_UPDATE: timer.seconds.get("update", 0.0), K.TOKENS_PER_S: n_tokens / max(step_time, 1e-9),
            **_reward_throughput(exp, step_time)}


def _reward_throughput(exp: Experience, step_time: float) -> dict[str, float]:
    """The verifier's share of the step's time and the responses it scored per second of its time."""
    reward_s = exp.seconds.get("reward", 0.0)
    scored = exp.reward_scored if exp.reward_scored is not None else int(exp.rewards.numel())
    return {K.TIME_REWARD_FRAC: reward_s / max(step_time, 1e-9),
            K.TIME_REWARD_PER_S: scored / reward_s if reward_s > 0 else float("nan")}


def _logprobs(model, rollout, spec: UpdateSpec) -> torch.Tensor:
    return response_logprobs(model, rollout, temperature=spec.temperature,
                             micro_batch_size=spec.micro_batch_size or None).logp


def _evaluate(model, tokenizer, items, cfg: Config, collector: Collector | None = None):
    return evaluate(model, tokenizer, items, greedy=True, max_new_tokens=cfg.rollout.max_new_tokens, env=cfg.env,
                    collector=collector)


def _warner(cfg: Config, log: Callable[[str], None]) -> Callable[[str], None]:
    """Where training warnings go: above the progress bar when one is drawn, else ``log``."""
    if cfg.log.progress and sys.stderr.isatty():
        from tqdm.auto import tqdm

        return tqdm.write
    return log


def _progress(cfg: Config, initial: int, log: Callable[[str], None] = print):
    """A tqdm bar on a terminal; in a log file one line every ``log.progress_every`` steps with an ETA."""
    if cfg.log.progress:
        from grpolab.utils.progress import progress_bar

        return progress_bar(cfg.trainer.steps, initial=initial, desc="grpo", every=cfg.log.progress_every, log=log)

    class _Null:
        def update(self, *_):
            pass

        def set_postfix(self, **_):
            pass

        def close(self):
            pass

    return _Null()


def load_run_config(run_dir: str | Path) -> Config:
    """The config a run was started with (``RUN_DIR/config.yaml``)."""
    return RunDir(run_dir).load_config()


__all__ = ["PhaseTimer", "TrainResult", "learning_signal", "load_run_config", "seed_everything", "train"]
