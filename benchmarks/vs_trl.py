"""Seconds per GRPO step: TRL's ``GRPOTrainer`` vs grpolab's ``train`` on the same tiny setup.

Both trainers load the same checkpoint (grpolab's tiny Llama, seed 0, saved with
``grpolab.models.save_model``), draw prompts from the same 256 ``arith`` training items, and make one
optimizer step per batch of 16 prompts x 8 samples = 128 completions of at most 48 tokens, sampled
at temperature 1.0 / top_p 1.0, with a token-level ("dapo") loss, clip 0.2 / 0.28, no KL / no
reference model, AdamW lr 1e-3 (betas 0.9 / 0.99, no weight decay, constant lr, no warm-up),
gradient clipping at 1.0, on the CPU, with torch's default thread count.

What is timed (evaluation, checkpointing and logging are outside both timers):

* TRL: a ``TrainerCallback``; ``on_step_begin`` -> ``on_step_end`` of each optimizer step. In
  transformers' inner loop ``on_step_begin`` fires after the batch of 128 dataset rows has been
  fetched (``get_batch_samples``), then ``training_step`` runs ``GRPOTrainer._prepare_inputs``
  (generation with ``model.generate`` + decoding + reward + advantages), the loss and backward,
  then gradient clipping, ``optimizer.step``, ``lr_scheduler.step`` and ``zero_grad``; then
  ``on_step_end`` fires, *before* ``_maybe_log_save_evaluate``. With
  ``per_device_train_batch_size=128``, ``gradient_accumulation_steps=1`` (so
  ``steps_per_generation=1``, ``generation_batch_size=128``) generation happens inside every
  timed step, and TRL skips the separate old-log-prob forward (``old_per_token_logps=None``).
  The time between consecutive ``on_step_end`` calls (which adds the dataloader fetch and
  TRL's/transformers' per-step bookkeeping) is reported too, as a secondary number.
* grpolab: ``time/step`` from the run's ``metrics.jsonl``: from drawing the step's prompts to the
  end of the optimizer update and the step's metric computation (prompt encoding, sampling,
  decoding, reward, advantages, update), excluding evaluation, the metrics write and
  checkpoints. Being on-policy with one optimizer step, grpolab too skips the old-log-prob pass.

A phase split is reported too: "rollout" (TRL: the trainer instance's
``_generate_and_score_completions``, timed through an instance-attribute wrapper; grpolab:
``time/rollout + time/reward``) and "update" (the rest of the step). For CPU-time and contention
numbers per grpolab step, ``grpolab.train.loop.sample`` / ``_step_metrics`` are wrapped during the
run (read-only; nothing in grpolab or TRL is edited).

TRL's ``GRPOConfig`` turns activation checkpointing on by default; it is turned off here (grpolab
recomputes nothing), ``--trl-checkpointing`` keeps it. Steps 2..N of each run are summarised (step 1
is warm-up); the generated-token rate is reported too, because sampled lengths differ a little.
The machine may be shared: before each run the script waits (``--wait-idle``) for other processes
to leave the CPU, and it records how many cores other processes used during each run.

Run::

    python benchmarks/vs_trl.py [--steps 8] [--rounds 2] [--order trl,grpolab] [--only trl|grpolab]
                                [--wait-idle 120] [--trl-checkpointing] [--out PATH]

It prints a table and writes ``benchmarks/results/vs_trl.json`` (atomically: temp file + os.replace)
with the machine (CPUs, torch threads, versions), all settings and every step's timing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from grpolab.utils.io import atomic_write_json

HERE = Path(__file__).resolve().parent
#: a step is "quiet" when other processes kept fewer than this many cores busy on average during it
QUIET_CORES = 0.25
DEFAULT_OUT = HERE / "results" / "vs_trl.json"

TIMED = {
    "trl": (
        "TrainerCallback on_step_begin -> on_step_end per optimizer step: generation "
        "(GRPOTrainer._prepare_inputs -> model.generate), decode, reward, advantages, loss + "
        "backward, grad clip, optimizer.step, lr_scheduler.step, zero_grad. Excludes the dataloader "
        "fetch of the 128 rows (before on_step_begin) and _maybe_log_save_evaluate (after "
        "on_step_end). 'between_step_ends' adds both back."
    ),
    "grpolab": (
        "metrics.jsonl 'time/step': prompt draw + encoding, sampling, decoding, reward, advantages, "
        "update (forward/backward, grad clip, optimizer.step, scheduler.step) and the step's metric "
        "computation. Excludes evaluation (step 0 and step N), metrics write, progress bar, "
        "checkpoints."
    ),
}


# ------------------------------------------------------------------------------------------------
# helpers


def summarize(step_times: list[float], lengths: list[float], skip: int = 1) -> dict:
    """Median/mean seconds per step over steps ``skip+1..N`` and generated tokens per second."""
    t = step_times[skip:]
    ln = lengths[skip:]
    if not t:
        return {"n_steps_summarized": 0}
    out = {
        "n_steps_summarized": len(t),
        "median_s_per_step": statistics.median(t),
        "mean_s_per_step": statistics.fmean(t),
        "min_s_per_step": min(t),
        "max_s_per_step": max(t),
    }
    if ln and len(ln) == len(t):
        out["mean_completion_length"] = statistics.fmean(ln)
    return out


def with_tokens(summary: dict, per_step_tokens: list[float], step_times: list[float], skip: int = 1) -> dict:
    tok = per_step_tokens[skip:]
    t = step_times[skip:]
    if tok and len(tok) == len(t):
        summary["gen_tokens_per_step_mean"] = statistics.fmean(tok)
        summary["gen_tokens_per_s"] = sum(tok) / sum(t)  # total generated tokens / total step time
    return summary


def cpu_seconds() -> float:
    """CPU time of this process, all threads (user + system)."""
    t = os.times()
    return t.user + t.system


def machine_info() -> dict:
    import accelerate
    import transformers
    import trl

    try:
        import grpolab

        grpolab_version = getattr(grpolab, "__version__", "unknown")
    except Exception:  # pragma: no cover
        grpolab_version = "import failed"
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        affinity = None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "cuda_available": torch.cuda.is_available(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "python": sys.version.split()[0],
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
            "accelerate": accelerate.__version__,
            "grpolab": grpolab_version,
        },
    }


def load_items(n: int):
    """The arith training items. Prefers the public ``grpolab.tasks.get_task``."""
    try:
        from grpolab.tasks import get_task

        source = "grpolab.tasks.get_task"
    except ImportError:
        # The public export was missing while grpolab.tasks was being written; the registry lives
        # in grpolab.tasks.base and the task registers itself on import of grpolab.tasks.arith.
        import grpolab.tasks.arith  # noqa: F401
        from grpolab.tasks.base import get_task

        source = "grpolab.tasks.base.get_task (grpolab.tasks.get_task not exported)"
    return get_task("arith").items("train", n), source


def build_checkpoint(path: Path, source: Path | None = None) -> dict:
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, load_model, save_model

    if source is not None:  # a warm-started model (e.g. `grpolab sft --out DIR`): rewards are mixed
        model, tok = load_model(source)
        save_model(model, tok, path)
        return {"n_params": sum(p.numel() for p in model.parameters()), "vocab_size": len(tok),
                "source": str(source)}
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(), seed=0)
    save_model(model, tok, path)
    return {"n_params": sum(p.numel() for p in model.parameters()), "vocab_size": len(tok),
            "config": dict(TinyModelConfig().__dict__)}


# ------------------------------------------------------------------------------------------------
# TRL


def run_trl(model_dir: Path, items, s: dict, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from grpolab.rewards import safe_score

    gen_lengths: list[list[int]] = []  # per reward call (= per generation = per step here)
    rewards_seen: list[float] = []

    def arith_reward(prompts, completions, completion_ids=None, reference=None, reward_name=None, **kwargs):
        scores = [safe_score(name, c, ref).score for c, ref, name in zip(completions, reference, reward_name)]
        gen_lengths.append([len(ids) for ids in completion_ids])  # tokens incl. EOS, like grpolab
        rewards_seen.append(statistics.fmean(scores))
        return scores

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.begin = None
            self.cpu_begin = None
            self.cpu: list[float] = []
            self.others: list = []  # cores used by other processes during each step
            self.counters_begin = None
            self.durations: list[float] = []
            self.ends: list[float] = []
            self.gen_calls_at_end: list[int] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.counters_begin = cpu_counters()
            self.cpu_begin = cpu_seconds()
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            self.cpu.append(cpu_seconds() - self.cpu_begin)
            self.others.append(others_cores(self.counters_begin, cpu_counters()))
            self.durations.append(now - self.begin)
            self.ends.append(now)
            self.gen_calls_at_end.append(len(gen_lengths))

    ds = Dataset.from_dict({
        "prompt": [it.prompt for it in items],
        "reference": [it.reference for it in items],
        "reward_name": [it.reward for it in items],
    })
    B = s["prompts_per_step"] * s["group_size"]
    args = GRPOConfig(
        output_dir=str(work / "trl_out"),
        # one optimizer step == one generation batch of B completions, one forward/backward over all
        per_device_train_batch_size=B,
        gradient_accumulation_steps=1,
        num_generations=s["group_size"],
        num_iterations=1,
        max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"],
        top_p=s["top_p"],
        top_k=0,
        beta=0.0,
        loss_type="dapo",
        epsilon=s["clip_low"],
        epsilon_high=s["clip_high"],
        scale_rewards="group",
        learning_rate=s["lr"],
        optim="adamw_torch",
        adam_beta1=s["beta1"],
        adam_beta2=s["beta2"],
        weight_decay=0.0,
        max_grad_norm=s["grad_clip"],
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=s["steps"],
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        logging_steps=10**9,
        log_completions=False,
        disable_tqdm=True,
        use_cpu=True,
        bf16=False,
        fp16=False,
        dataloader_num_workers=0,
        seed=s["seed"],
        # TRL's GRPOConfig turns activation (gradient) checkpointing on by default; grpolab does not
        # recompute activations, so it is off here unless --trl-checkpointing is given.
        activation_checkpointing=s["trl_activation_checkpointing"],
    )
    assert args.steps_per_generation == 1 and args.generation_batch_size == B, (
        args.steps_per_generation, args.generation_batch_size)
    timer = StepTimer()
    t_setup = time.perf_counter()
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=arith_reward, args=args, train_dataset=ds,
                          callbacks=[timer])
    setup_s = time.perf_counter() - t_setup
    # phase split (instance attribute only, the library is untouched): generation + decoding +
    # reward + advantages, vs the rest of the step (loss, backward, optimizer)
    gen_phase: list[float] = []
    orig_gen = trainer._generate_and_score_completions

    def timed_generate_and_score(*a, **k):
        t = time.perf_counter()
        out = orig_gen(*a, **k)
        gen_phase.append(time.perf_counter() - t)
        return out

    trainer._generate_and_score_completions = timed_generate_and_score
    model = trainer.model
    info = {
        "model_dtype": str(next(model.parameters()).dtype),
        "activation_checkpointing": bool(args.activation_checkpointing),
        "steps_per_generation": args.steps_per_generation,
        "generation_batch_size": args.generation_batch_size,
        "per_device_train_batch_size": args.per_device_train_batch_size,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "generation_config": {k: getattr(trainer.generation_config, k, None) for k in (
            "max_new_tokens", "do_sample", "temperature", "top_p", "top_k", "eos_token_id", "pad_token_id",
            "cache_implementation")},
        "optimizer": None,
    }
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    info["model_is_checkpointing_after_train"] = bool(getattr(model, "is_activation_checkpointing", False))
    info["optimizer"] = type(trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer")
                             else trainer.optimizer).__name__
    if timer.gen_calls_at_end != list(range(1, len(timer.durations) + 1)):
        raise RuntimeError(f"expected exactly one generation per timed step, got {timer.gen_calls_at_end}")
    lengths = [statistics.fmean(x) for x in gen_lengths]
    tokens = [float(sum(x)) for x in gen_lengths]
    between = [b - a for a, b in zip(timer.ends, timer.ends[1:])]  # steps 2..N
    return {
        "step_times_s": timer.durations,
        "step_cpu_s": timer.cpu,
        "step_others_cores": timer.others,
        "phase_rollout_s": gen_phase if len(gen_phase) == len(timer.durations) else None,
        "between_step_ends_s": between,
        "mean_completion_length_per_step": lengths,
        "gen_tokens_per_step": tokens,
        "mean_reward_per_step": rewards_seen,
        "setup_s": setup_s,
        "train_call_s": train_s,
        "info": info,
    }


# ------------------------------------------------------------------------------------------------
# grpolab


class _GrpolabCpuProbe:
    """Per-step process CPU time for grpolab (read-only instrumentation; the wall time comes from
    ``metrics.jsonl``). ``train`` exposes no step hooks, so the names the loop module calls at the
    start of a step (``sample``, right after the prompts are drawn and encoded) and at its end
    (``_step_metrics``, just before ``time/step`` is taken) are wrapped for the duration of the run.
    Evaluation uses its own import of the sampler and is not seen. If the loop changes and these
    names are gone, CPU time is simply not reported for grpolab."""

    def __init__(self):
        import grpolab.train.loop as loop

        self.loop = loop
        self.starts: list[tuple[float, float]] = []
        self.ends: list[tuple[float, float]] = []
        self.saved = {}
        self.note = "wrapped grpolab.train.loop.sample (step start) and _step_metrics (step end)"
        if not (callable(getattr(loop, "sample", None)) and callable(getattr(loop, "_step_metrics", None))):
            self.note = "grpolab.train.loop has no sample/_step_metrics to wrap: no CPU time"
            return
        for name, sink, at_end in (("sample", self.starts, False), ("_step_metrics", self.ends, True)):
            fn = getattr(loop, name)
            self.saved[name] = fn

            def wrapper(*a, _fn=fn, _sink=sink, _at_end=at_end, **k):
                if not _at_end:
                    _sink.append((time.perf_counter(), cpu_seconds(), cpu_counters()))
                out = _fn(*a, **k)
                if _at_end:
                    _sink.append((time.perf_counter(), cpu_seconds(), cpu_counters()))
                return out

            setattr(loop, name, wrapper)

    def remove(self):
        for name, fn in self.saved.items():
            setattr(self.loop, name, fn)
        self.saved = {}

    @property
    def wall(self):
        if len(self.starts) != len(self.ends):
            return None
        return [e[0] - b[0] for b, e in zip(self.starts, self.ends)]

    def per_step(self, n: int):
        if len(self.starts) != n or len(self.ends) != n:
            if self.saved or self.starts or self.ends:
                self.note += f" -- saw {len(self.starts)} starts / {len(self.ends)} ends for {n} steps: no CPU time"
            return None
        return [e[1] - b[1] for b, e in zip(self.starts, self.ends)]

    def others(self, n: int):
        if len(self.starts) != n or len(self.ends) != n:
            return None
        return [others_cores(b[2], e[2]) for b, e in zip(self.starts, self.ends)]


def run_grpolab(model_dir: Path, s: dict, work: Path) -> dict:
    from grpolab.config import load_config
    from grpolab.train import train

    run_dir = work / "grpolab_run"
    N = s["steps"]
    overrides = {
        "model.path": str(model_dir),
        "model.device": "cpu",
        "sft.enabled": "no",
        "task.name": "arith",
        "task.n_train": s["n_items"],
        "task.n_eval": s["grpolab_n_eval"],
        "rollout.prompts_per_step": s["prompts_per_step"],
        "rollout.group_size": s["group_size"],
        "rollout.max_new_tokens": s["max_new_tokens"],
        "rollout.temperature": s["temperature"],
        "rollout.top_p": s["top_p"],
        "objective.advantage": "grpo",
        "objective.ratio": "token",
        "objective.aggregation": "token",
        "objective.clip_low": s["clip_low"],
        "objective.clip_high": s["clip_high"],
        "objective.kl_coef": 0.0,
        "optim.lr": s["lr"],
        "optim.beta1": s["beta1"],
        "optim.beta2": s["beta2"],
        "optim.weight_decay": 0.0,
        "optim.warmup_steps": 0,
        "optim.schedule": "constant",
        "optim.grad_clip": s["grad_clip"],
        "trainer.steps": N,
        "trainer.epochs": 1,
        "trainer.skip_zero_advantage": s["grpolab_skip_zero_advantage"],
        "trainer.mini_batches": 1,
        "trainer.micro_batch_size": 0,
        "trainer.eval_every": N,
        "trainer.save_every": N,
        "trainer.seed": s["seed"],
        "trainer.run_dir": str(run_dir),
        "log.tensorboard": False,
        "log.wandb": False,
        "log.plots": False,
        "log.progress": False,
    }
    cfg = load_config(overrides={k: str(v) if not isinstance(v, str) else v for k, v in overrides.items()})
    messages: list[str] = []
    probe = _GrpolabCpuProbe()
    t0 = time.perf_counter()
    try:
        train(cfg, log=messages.append)
    finally:
        probe.remove()
    train_s = time.perf_counter() - t0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "time/step" in r]
    rows.sort(key=lambda r: r["step"])
    if [r["step"] for r in rows] != list(range(1, N + 1)):
        raise RuntimeError(f"metrics.jsonl has steps {[r['step'] for r in rows]}, expected 1..{N}")
    times = [float(r["time/step"]) for r in rows]
    cpu = probe.per_step(N)
    lengths = [float(r["length/mean"]) for r in rows]
    B = s["prompts_per_step"] * s["group_size"]
    tokens = [ln * B for ln in lengths]
    return {
        "step_times_s": times,
        "step_cpu_s": cpu,
        "step_others_cores": probe.others(N),
        "cpu_probe": probe.note,
        "cpu_probe_wall_s": probe.wall,
        "time_rollout_s": [r.get("time/rollout") for r in rows],
        "time_reward_s": [r.get("time/reward") for r in rows],
        "time_update_s": [r.get("time/update") for r in rows],
        "phase_rollout_s": [float(r["time/rollout"]) + float(r.get("time/reward") or 0.0) for r in rows]
        if all("time/rollout" in r for r in rows) else None,
        "mean_completion_length_per_step": lengths,
        "gen_tokens_per_step": tokens,
        "mean_reward_per_step": [r.get("reward/mean") for r in rows],
        "train_call_s": train_s,
        "overrides": overrides,
        "log": messages,
    }


# ------------------------------------------------------------------------------------------------


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)


def pooled(rounds: list[dict], skip: int = 1) -> dict:
    """Summary over all rounds of one trainer, each round's first ``skip`` steps left out."""
    times, lengths, tokens, cpu = [], [], [], []
    for r in rounds:
        times += r["step_times_s"][skip:]
        lengths += r["mean_completion_length_per_step"][skip:]
        tokens += r["gen_tokens_per_step"][skip:]
        cpu = None if cpu is None or r.get("step_cpu_s") is None else cpu + r["step_cpu_s"][skip:]
    out = with_tokens(summarize(times, lengths, skip=0), tokens, times, skip=0)
    if cpu:
        out["median_cpu_s_per_step"] = statistics.median(cpu)
        out["mean_cpu_s_per_step"] = statistics.fmean(cpu)
    # steps during which other processes kept (on average) less than QUIET_CORES cores busy
    quiet_t, quiet_tok = [], []
    unknown = 0
    for r in rounds:
        oc = r.get("step_others_cores")
        if oc is None:
            unknown += len(r["step_times_s"]) - skip
            continue
        for i in range(skip, len(r["step_times_s"])):
            if oc[i] is not None and oc[i] < QUIET_CORES:
                quiet_t.append(r["step_times_s"][i])
                quiet_tok.append(r["gen_tokens_per_step"][i])
    # phase split: "rollout" = sampling + decoding + reward (+ advantages for TRL), "update" = the rest
    # (over quiet steps when there are any, else over all steps)
    ro, up, qro, qup = [], [], [], []
    for r in rounds:
        ph = r.get("phase_rollout_s")
        if ph is None:
            continue
        oc = r.get("step_others_cores") or [None] * len(ph)
        for i in range(skip, len(r["step_times_s"])):
            ro.append(ph[i])
            up.append(r["step_times_s"][i] - ph[i])
            if oc[i] is not None and oc[i] < QUIET_CORES:
                qro.append(ph[i])
                qup.append(r["step_times_s"][i] - ph[i])
    if ro:
        out["phase_basis"] = "quiet steps" if qro else "all steps"
        out["median_rollout_phase_s"] = statistics.median(qro or ro)
        out["median_update_phase_s"] = statistics.median(qup or up)
    out["quiet_steps"] = len(quiet_t)
    out["contended_steps"] = len(times) - len(quiet_t) - unknown
    out["steps_without_contention_data"] = unknown
    if quiet_t:
        out["quiet_median_s_per_step"] = statistics.median(quiet_t)
        out["quiet_mean_s_per_step"] = statistics.fmean(quiet_t)
        out["quiet_gen_tokens_per_s"] = sum(quiet_tok) / sum(quiet_t)
    return out


def cpu_counters():
    """``(wall, system busy CPU-seconds, this process's CPU-seconds)`` from /proc (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz  # all but idle and iowait (guest is in user)
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    return time.perf_counter(), busy, t.user + t.system


def others_cores(a, b):
    """Average number of CPU cores busy with *other* processes between two :func:`cpu_counters`."""
    if a is None or b is None or b[0] <= a[0]:
        return None
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0]))


def wait_for_idle(max_wait: float, threshold: float = 0.25, window: float = 2.0) -> dict:
    """Wait (at most ``max_wait`` s) until other processes use < ``threshold`` cores over ``window`` s."""
    t0 = time.perf_counter()
    last = None
    while True:
        a = cpu_counters()
        time.sleep(window)
        last = others_cores(a, cpu_counters())
        if last is None or last < threshold or time.perf_counter() - t0 >= max_wait:
            return {"waited_s": round(time.perf_counter() - t0, 1), "others_cores": last}


def loadavg():
    try:
        return list(os.getloadavg())
    except OSError:  # pragma: no cover
        return None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per trainer run (the first is warm-up)")
    p.add_argument("--rounds", type=int, default=2,
                   help="alternate the trainers this many times (trl, grpolab, trl, ...); steps are pooled")
    p.add_argument("--order", default="trl,grpolab", help="run order within a round, comma-separated")
    p.add_argument("--only", choices=("trl", "grpolab"), default=None, help="run one trainer only")
    p.add_argument("--trl-checkpointing", action="store_true",
                   help="keep TRL's default activation checkpointing (off by default here: grpolab has none)")
    p.add_argument("--wait-idle", type=float, default=120.0,
                   help="before each run wait up to this many seconds for other processes to leave the CPU "
                        "(< 0.25 cores busy over 2 s); 0 disables")
    p.add_argument("--model", type=Path, default=None,
                   help="start both trainers from this HF model directory (e.g. a warm start from "
                        "`grpolab sft --out DIR`, so rewards are mixed); default: the untrained tiny model")
    p.add_argument("--grpolab-skip-zero-advantage", choices=("true", "false"), default="true",
                   help="grpolab's trainer.skip_zero_advantage (exact: rows with A=0 have zero gradient)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    if a.steps < 2:
        p.error("--steps must be >= 2 (step 1 is warm-up)")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")

    s = {
        "steps": a.steps, "rounds": a.rounds, "warmup_steps_skipped_per_run": 1, "n_items": 256,
        "prompts_per_step": 16, "group_size": 8, "completions_per_step": 128, "max_new_tokens": 48,
        "temperature": 1.0, "top_p": 1.0, "clip_low": 0.2, "clip_high": 0.28, "kl_coef_beta": 0.0,
        "loss": "token-level (TRL loss_type=dapo, grpolab objective.aggregation=token)",
        "advantage": "group mean/std (TRL scale_rewards=group, grpolab objective.advantage=grpo)",
        "lr": 1e-3, "optimizer": "AdamW", "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0,
        "lr_schedule": "constant, no warm-up", "grad_clip": 1.0, "seed": 0, "device": "cpu",
        "dtype": "float32", "grpolab_n_eval": 64, "task": "arith",
        "reward": "grpolab.rewards.safe_score(item.reward, completion, item.reference).score",
        "model": (f"warm-started model from {a.model}" if a.model else
                  "grpolab tiny Llama (TinyModelConfig defaults), build seed 0, no warm start"),
        "grpolab_skip_zero_advantage": a.grpolab_skip_zero_advantage,
        "trl_activation_checkpointing": bool(a.trl_checkpointing),
        "trl_batching": "per_device_train_batch_size=128, gradient_accumulation_steps=1, num_iterations=1 "
                        "-> steps_per_generation=1, generation_batch_size=128",
        "grpolab_batching": "trainer.epochs=1, mini_batches=1, micro_batch_size=0 (whole batch)",
    }
    machine = machine_info()
    print(f"torch threads: {torch.get_num_threads()} (interop {torch.get_num_interop_threads()}), "
          f"cpus: {machine['cpu_count']}, load average: {loadavg()}, versions: {machine['versions']}", flush=True)

    result: dict = {"machine": machine, "settings": s, "timed": TIMED, "runs": [], "results": {}, "errors": {}}
    order = [x.strip() for x in a.order.split(",") if x.strip()]
    if a.only:
        order = [a.only]
    for side in order:
        if side not in ("trl", "grpolab"):
            p.error(f"unknown trainer {side!r} in --order")
    rounds: dict[str, list[dict]] = {side: [] for side in order}
    with tempfile.TemporaryDirectory(prefix="grpolab_vs_trl_") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        result["model"] = build_checkpoint(model_dir, a.model)
        items, source = load_items(s["n_items"])
        s["task_items_source"] = source
        for rnd in range(a.rounds):
            for side in order:
                if side in result["errors"]:
                    continue
                print(f"\n=== {side}: round {rnd + 1}/{a.rounds}, {a.steps} steps ===", flush=True)
                run_work = work / f"{side}_{rnd}"
                run_work.mkdir()
                idle = wait_for_idle(a.wait_idle) if a.wait_idle > 0 else None
                if idle is not None:
                    print(f"waited {idle['waited_s']}s for an idle CPU; other processes then used "
                          f"{fmt(idle['others_cores'], '.2f')} cores", flush=True)
                before = loadavg()
                c0 = cpu_counters()
                t0 = time.perf_counter()
                try:
                    if side == "trl":
                        r = run_trl(model_dir, items, s, run_work)
                    else:
                        r = run_grpolab(model_dir, s, run_work)
                except Exception:
                    tb = traceback.format_exc()
                    result["errors"][side] = tb
                    print(f"{side} FAILED:\n{tb}", file=sys.stderr, flush=True)
                    continue
                c1 = cpu_counters()
                r.update(trainer=side, round=rnd, wall_s=time.perf_counter() - t0,
                         loadavg_before=before, loadavg_after=loadavg(), wait_idle=idle,
                         others_cores_during_run=others_cores(c0, c1),
                         own_cpu_s=None if c0 is None or c1 is None else c1[2] - c0[2])
                rounds[side].append(r)
                result["runs"].append(r)
                print(f"{side}: {r['wall_s']:.1f}s wall (incl. setup/eval), s/step "
                      f"{[round(x, 3) for x in r['step_times_s']]}, other processes used "
                      f"{fmt(r['others_cores_during_run'], '.2f')} cores on average during the run", flush=True)

    res = result["results"]
    for side, rs in rounds.items():
        if rs:
            res[side] = pooled(rs)
            if side == "trl":
                between = [x for r in rs for x in r["between_step_ends_s"]]
                res[side]["between_step_ends_median_s"] = statistics.median(between) if between else None
    if "trl" in res and "grpolab" in res:
        t, g = res["trl"], res["grpolab"]
        result["ratio_trl_over_grpolab"] = {
            "median_s_per_step": t["median_s_per_step"] / g["median_s_per_step"],
            "mean_s_per_step": t["mean_s_per_step"] / g["mean_s_per_step"],
            "gen_tokens_per_s_grpolab_over_trl": g["gen_tokens_per_s"] / t["gen_tokens_per_s"],
        }
        if t.get("quiet_steps", 0) >= 2 and g.get("quiet_steps", 0) >= 2:
            result["ratio_trl_over_grpolab"]["quiet_median_s_per_step"] = (
                t["quiet_median_s_per_step"] / g["quiet_median_s_per_step"])
        if "median_cpu_s_per_step" in t and "median_cpu_s_per_step" in g:
            result["ratio_trl_over_grpolab"]["median_cpu_s_per_step"] = (
                t["median_cpu_s_per_step"] / g["median_cpu_s_per_step"])
        # Verdict on the >= 2x target. Oversubscribed CPUs slow the two trainers by wildly different
        # factors (OpenMP threads spin and wait), so contended steps cannot support a verdict.
        contended = any(x.get("contended_steps", 0) or x.get("steps_without_contention_data", 0) for x in (t, g))
        if not contended:
            basis, ratio = "all summarized steps (no contention measured)", result["ratio_trl_over_grpolab"]["median_s_per_step"]
        elif t.get("quiet_steps", 0) >= 3 and g.get("quiet_steps", 0) >= 3:
            basis, ratio = (f"quiet steps only (other processes < {QUIET_CORES} cores; {t['quiet_steps']} TRL, "
                            f"{g['quiet_steps']} grpolab)"), result["ratio_trl_over_grpolab"]["quiet_median_s_per_step"]
        else:
            basis, ratio = "inconclusive: too few steps without CPU contention; rerun on an idle machine", None
        result["verdict"] = {"basis": basis, "median_ratio_trl_over_grpolab": ratio,
                             "target_2x_met": None if ratio is None else ratio >= 2.0}
    others = [r["others_cores_during_run"] for r in result["runs"] if r.get("others_cores_during_run") is not None]
    if others and max(others) > 0.25:
        result["warning"] = (
            "other processes used on average " + ", ".join(
                f"{r['trainer']}#{r['round'] + 1}: {r['others_cores_during_run']:.2f}" for r in result["runs"]
                if r.get("others_cores_during_run") is not None)
            + f" CPU cores (of {machine['cpu_count']}) during the runs: timings are contended and noisy")

    # ---- table ----
    print(f"\nseconds per step, steps 2..{a.steps} of each run ({a.rounds} round(s); step 1 = warm-up); "
          f"{s['prompts_per_step']} prompts x {s['group_size']} = {s['completions_per_step']} completions, "
          f"<= {s['max_new_tokens']} tokens; torch threads {machine['torch_num_threads']}, "
          f"{machine['cpu_count']} CPUs")
    hdr = (f"{'trainer':<9} {'steps':>5} {'median s/step':>13} {'mean s/step':>11} {'min':>7} {'max':>7} "
           f"{'mean len':>8} {'gen tok/s':>9} {'median CPU-s/step':>17} {'quiet steps':>11} {'quiet median':>12}")
    print(hdr)
    print("-" * len(hdr))
    for side in ("trl", "grpolab"):
        if side in res:
            m = res[side]
            print(f"{side:<9} {m.get('n_steps_summarized', 0):>5} {fmt(m.get('median_s_per_step')):>13} "
                  f"{fmt(m.get('mean_s_per_step')):>11} {fmt(m.get('min_s_per_step')):>7} "
                  f"{fmt(m.get('max_s_per_step')):>7} {fmt(m.get('mean_completion_length'), '.1f'):>8} "
                  f"{fmt(m.get('gen_tokens_per_s'), '.0f'):>9} {fmt(m.get('median_cpu_s_per_step')):>17} "
                  f"{m.get('quiet_steps', 0):>11} {fmt(m.get('quiet_median_s_per_step')):>12}")
        elif side in result["errors"]:
            print(f"{side:<9} FAILED ({result['errors'][side].strip().splitlines()[-1][:90]})")
    if all("median_rollout_phase_s" in res.get(x, {}) for x in ("trl", "grpolab")):
        t, g = res["trl"], res["grpolab"]
        print(f"phases (median s/step over {t['phase_basis']} / {g['phase_basis']}): rollout = sampling + decoding + reward (+ advantages): "
              f"TRL {t['median_rollout_phase_s']:.3f} vs grpolab {g['median_rollout_phase_s']:.3f}; "
              f"update = the rest: TRL {t['median_update_phase_s']:.3f} vs grpolab {g['median_update_phase_s']:.3f}")
    if res.get("trl", {}).get("between_step_ends_median_s") is not None:
        print(f"(TRL median time between consecutive on_step_end, i.e. adding the dataloader fetch and "
              f"log/save bookkeeping: {res['trl']['between_step_ends_median_s']:.3f}s)")
    if "ratio_trl_over_grpolab" in result:
        r = result["ratio_trl_over_grpolab"]
        print(f"ratio TRL/grpolab s/step, all steps: median {r['median_s_per_step']:.2f}x, mean "
              f"{r['mean_s_per_step']:.2f}x; generated tokens/s grpolab/TRL "
              f"{r['gen_tokens_per_s_grpolab_over_trl']:.2f}x")
        if "quiet_median_s_per_step" in r:
            print(f"ratio TRL/grpolab over quiet steps only (other processes < {QUIET_CORES} cores): median "
                  f"{r['quiet_median_s_per_step']:.2f}x ({res['trl']['quiet_steps']} TRL, "
                  f"{res['grpolab']['quiet_steps']} grpolab steps)")
    if "warning" in result:
        print("WARNING: " + result["warning"])
    if "verdict" in result:
        v = result["verdict"]
        met = {True: "MET", False: "NOT met", None: "undecided"}[v["target_2x_met"]]
        print(f"VERDICT (target: grpolab >= 2x faster per step): {met}; median TRL/grpolab "
              f"{fmt(v['median_ratio_trl_over_grpolab'], '.2f')}x, basis: {v['basis']}")
    print("timed:")
    for side, what in TIMED.items():
        print(f"  {side}: {what}")
    atomic_write_json(a.out, result)
    print(f"wrote {a.out}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
