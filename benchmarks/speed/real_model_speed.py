"""Speed and memory on a real model (SmolLM2-135M-Instruct or any local HF causal LM), one run.

Everything is measured in one process run, interleaved where two things are compared, with the
same torch thread count (``--threads``, default 2), so the ratios hold even on a shared machine
(the absolute numbers do not: the load average is recorded with every measurement).

1. **Ceiling**: float32 ``torch.mm`` 1024^3 GFLOP/s, measured before, between and after the timed
   sections; the ceiling is the highest reading (on a shared machine a reading can only be pulled
   down by other processes, and on a busy one the median fell below what the update itself reached).
2. **Rollout**: the same chat-template prompts (``--prompts`` x ``--group-size`` rows), the same
   sampling (temperature 1, top-p 1, no top-k), exactly ``--max-new-tokens`` new tokens per row (EOS
   off on both sides, so both generate the same number of tokens), KV cache on:
   ``grpolab.rollout.sample`` against Hugging Face ``generate`` (``num_return_sequences`` = group
   size, left-padded batch), ``--repeats`` rounds alternating which goes first. The FLOP floor is
   ``2 N`` FLOPs per generated token (``N`` = parameters, the tied embedding counted once: it is
   the LM head) plus attention ``4 * layers * heads * head_dim * context`` at the mean context
   length, at the measured ceiling.
3. **Update**: ``grpolab.train.update`` (forward + backward + AdamW, default micro-batching and
   shared prompts, zero-advantage skipping off) on one sampled batch, full fine-tuning and LoRA
   (r 16 on every projection), interleaved; tokens/s = every row's prompt + response tokens per
   second (what a joint forward would process); the share of the ceiling counts the tokens the
   shared-prompt forward computes (each distinct prompt once, every response; a lower bound when a
   group is split across micro-batches) at ``6 N`` FLOPs per token for full fine-tuning and ``4 N``
   for LoRA (no base-weight gradients), attention and the chunked head's recompute left out.
4. **vs TRL** (:mod:`grpolab.bench.trl_equal_work`, benchmarks/speed/vs_trl.py's two trainers on
   this model): TRL's ``GRPOTrainer`` and
   grpolab, same prompts at every step, same group size, ``max_new_tokens`` (``--trl-max-new-tokens``,
   default ``--max-new-tokens``), temperature, token-level loss, lr ``--lr``, one optimizer step per
   batch, skipping off; ``--trl-seeds`` seeds (each its own prompt order and sampling; which side
   goes first alternates), ``--trl-steps`` steps each, the first a warm-up; step ratio = TRL median
   s/step / grpolab median s/step over the timed steps of all seeds (and per seed); the verdict
   needs the mean completion lengths within 10%.
5. **Peak RSS** (``VmHWM`` of a child process running ``grpolab.train.train``, read by the child
   at its end, and the trainer's ``memory/peak_rss_mb`` after each step; not the parent's
   ``ru_maxrss`` of the child, which on Linux also counts this process's image at fork time): RLSD + LoRA and full-fine-tuning GRPO, two
   steps each from a fresh run directory (checkpoints saved; the second step is the first to hold
   AdamW's moments during an update), then step 3 with ``resume=True``, on a GSM8K-format file,
   ``--prompts`` x ``--group-size``, ``--max-new-tokens``, zero-advantage skipping off (so the
   update always runs: the worst case); the two configurations run side by side, each child with
   ``--rss-threads`` torch threads.

The process fixes glibc's mmap threshold first, as ``grpolab train`` does
(``grpolab.utils.heap.bound_heap``; ``GRPOLAB_MMAP_THRESHOLD=0`` turns it off): the rollout and
update timings of both sides run under it; in the TRL comparison each trainer runs under the
allocator its users get (TRL: the threshold at 32 MiB, where glibc's dynamic threshold settles).

    python benchmarks/speed/real_model_speed.py --model /path/to/smollm2-135m-instruct
    python benchmarks/speed/real_model_speed.py --model DIR --skip trl,rss   # the in-process parts only
    python benchmarks/speed/real_model_speed.py --model DIR --prompts 2 --group-size 2 --max-new-tokens 4 \
        --repeats 1 --trl-steps 2 --out /tmp/tiny.json                   # every part, end to end, fast
    python benchmarks/speed/real_model_speed.py --merge A.json B.json --out OUT  # parts of two invocations

``--merge`` joins the JSON of two invocations that measured different parts (e.g. the peak-RSS
children run concurrently with the timings, which they do not disturb in ratio: both sides of every
comparison share the load); each part keeps its own load readings and timestamps.

Writes ``runs/bench/real_model_speed.json`` (``--out``; the committed record: ``--out
docs/results/real_model_speed.json``) atomically and prints a table.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch

from grpolab.bench.timing import sync_device, time_hf_generate, time_sample, timing_prompts
from grpolab import bench

DEFAULT_OUT = bench.results_path("real_model_speed.json")
PARTS = ("rollout", "update", "trl", "rss")
#: the TRL side of the comparison runs with glibc's mmap threshold at 32 MiB, where glibc's dynamic
#: threshold settles in a torch process (a TRL user's process does not call bound_heap)
TRL_MMAP_THRESHOLD = 32 * 2**20


# ------------------------------------------------------------------------------------------------
# 2. rollout


def decode_matmuls(model, rows: int, reps: int = 5) -> tuple[float, int]:
    """``(seconds, flops)`` of one decode step's weight matmuls alone: every linear weight of the
    model (each projection of each layer and the LM head, the tied embedding once) applied to a
    ``[rows, in]`` activation, in model order; the median of ``reps`` passes. What a decode step
    cannot go below at this batch with these GEMMs, whatever else it saves."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    xs = {w.shape[1]: torch.randn(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights}
    times = []
    with torch.inference_mode():
        for rep in range(reps + 1):
            sync_device(model)
            t = time.perf_counter()
            for w in weights:
                torch.nn.functional.linear(xs[w.shape[1]], w)
            sync_device(model)
            if rep:  # the first pass warms up
                times.append(time.perf_counter() - t)
    return statistics.median(times), 2 * rows * sum(w.numel() for w in weights)


def part_rollout(model, tok, a, ceilings: list[float]) -> dict:
    prompts = timing_prompts(tok, a.prompts)
    G, T, pad = a.group_size, a.max_new_tokens, tok.pad_token_id
    B = len(prompts) * G
    time_sample(model, prompts, G, min(T, 4), pad, 0)  # warm-up (allocator, kernels)
    time_hf_generate(model, prompts, G, min(T, 4), pad, 0)
    times = bench.interleaved(
        {"grpolab": lambda r: time_sample(model, prompts, G, T, pad, r),
         "hf_generate": lambda r: time_hf_generate(model, prompts, G, T, pad, r)}, a.repeats,
        on_call=lambda r, side, s: print(f"  rollout round {r}: {side} {s:.2f} s (load {bench.load_average()})",
                                         flush=True),
        after_round=lambda r: ceilings.append(bench.matmul_gflops()))
    cfg = model.config
    N = bench.param_count(model)
    P_mean = statistics.fmean(len(p) for p in prompts)
    ctx = P_mean + (T + 1) / 2  # mean keys attended per generated token
    attn = 4 * cfg.num_hidden_layers * cfg.num_attention_heads * getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads) * ctx
    flops_per_token = 2 * N + attn
    ceiling = max(ceilings)
    med = {k: statistics.median(v) for k, v in times.items()}
    g_tps, h_tps = B * T / med["grpolab"], B * T / med["hf_generate"]
    floor_tps = ceiling * 1e9 / flops_per_token
    # the profile of a decode step: its weight matmuls alone at this batch, against the whole step
    mm_s, mm_flops = decode_matmuls(model, B)
    step_s = med["grpolab"] / T  # per generated token of every row (the prefill included)
    profile = {"decode_step_ms": 1e3 * step_s, "weight_matmuls_ms": 1e3 * mm_s,
               "weight_matmuls_share_of_step": mm_s / step_s,
               "weight_matmuls_gflops": mm_flops / mm_s / 1e9,
               "weight_matmuls_share_of_ceiling": mm_flops / mm_s / 1e9 / ceiling,
               "matmul_bound_tokens_per_s": B / mm_s}
    return {
        "rows": B, "prompts": len(prompts), "group_size": G, "max_new_tokens": T, "mean_prompt_tokens": P_mean,
        "seconds": times, "median_seconds": med,
        "grpolab_tokens_per_s": g_tps, "hf_generate_tokens_per_s": h_tps,
        "grpolab_over_hf": g_tps / h_tps,
        "flops_per_generated_token": flops_per_token,
        "flop_floor_tokens_per_s": floor_tps, "grpolab_share_of_floor": g_tps / floor_tps,
        "hf_share_of_floor": h_tps / floor_tps, "decode_profile": profile,
        "grpolab_share_of_matmul_bound": g_tps / profile["matmul_bound_tokens_per_s"], "load_after": bench.load_average(),
    }


# ------------------------------------------------------------------------------------------------
# 3. update


def sampled_batch(model, tok, a):
    from grpolab.rollout import sample

    prompts = timing_prompts(tok, a.prompts)
    r = sample(model, prompts, group_size=a.group_size, max_new_tokens=a.max_new_tokens, temperature=1.0,
               eos_token_id=None, pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(123))
    adv = torch.randn(r.batch_size, generator=torch.Generator().manual_seed(1))  # every row has signal
    return r, adv


def update_runner(model, lora: bool, lr: float):
    from grpolab.config import load_config
    from grpolab.models.lora import apply_lora
    from grpolab.models.memory import lean_swiglu
    from grpolab.rollout import Experience
    from grpolab.train import UpdateSpec, update
    from grpolab.train.optim import build_optimizer, build_scheduler

    if lora:
        apply_lora(model, {"r": 16, "alpha": 32})
    lean_swiglu(model)  # as grpolab.train.setup.prepare_policy does
    cfg = load_config(overrides={"trainer.skip_zero_advantage": "false", "optim.lr": str(lr)})
    spec = UpdateSpec.from_config(cfg)
    opt = build_optimizer(model, lr=lr, weight_decay=0.0, betas=(0.9, 0.99))
    sched = build_scheduler(opt, warmup_steps=0, total_steps=100, schedule="constant")

    def run(r, adv) -> float:
        t = time.perf_counter()
        update(model, opt, sched, Experience.from_rollout(r, adv), spec)
        return time.perf_counter() - t

    return run, spec


def part_update(model, tok, a, ceilings: list[float]) -> dict:
    from grpolab.rollout.logprobs import distinct_prompts
    from grpolab.train.policy_update import auto_micro_batch_tokens

    r, adv = sampled_batch(model, tok, a)
    tokens = int(r.prompt_mask.sum() + r.response_mask.sum())
    # what the shared-prompt forward computes: each distinct prompt once, plus every response
    first, _ = distinct_prompts(r.prompt_ids, r.prompt_mask)
    forwarded = int(r.prompt_mask[first].sum() + r.response_mask.sum())
    N = bench.param_count(model)
    runners = {"full": update_runner(copy.deepcopy(model), False, 1e-6),
               "lora": update_runner(copy.deepcopy(model), True, 1e-5)}
    for k, (run, _) in runners.items():  # warm-up
        run(r, adv)
    times = bench.interleaved(
        {k: (lambda _, run=run: run(r, adv)) for k, (run, _) in runners.items()}, a.repeats,
        on_call=lambda rep, k, s: print(f"  update round {rep}: {k} {s:.2f} s (load {bench.load_average()})",
                                        flush=True),
        after_round=lambda rep: ceilings.append(bench.matmul_gflops()))
    ceiling = max(ceilings)
    out = {"rows": r.batch_size, "tokens": tokens, "forwarded_tokens_at_most": forwarded,
           "response_tokens": int(r.response_mask.sum()),
           "micro_batch_tokens": runners["full"][1].micro_batch_tokens or auto_micro_batch_tokens(model),
           "seconds": times,
           "flops_per_token": {"full": 6 * N, "lora": 4 * N}}
    for k in times:
        med = statistics.median(times[k])
        f = (6 if k == "full" else 4) * N
        out[k] = {"median_s": med, "tokens_per_s": tokens / med,
                  "gflops": f * forwarded / med / 1e9, "share_of_ceiling": f * forwarded / med / 1e9 / ceiling}
    # the field names: update.tokens_per_s and its share of the ceiling, full and LoRA
    out["tokens_per_s"] = {k: out[k]["tokens_per_s"] for k in times}
    out["share_of_ceiling"] = {k: out[k]["share_of_ceiling"] for k in times}
    out["load_after"] = bench.load_average()
    return out


# ------------------------------------------------------------------------------------------------
# 4. vs TRL


def part_trl(model_dir: Path, a) -> dict:
    from grpolab.bench import trl_equal_work as vs

    T = a.trl_max_new_tokens or a.max_new_tokens
    s = {"prompts_per_step": a.prompts, "group_size": a.group_size, "max_new_tokens": T,
         "temperature": 1.0, "top_p": 1.0, "clip_low": 0.2, "clip_high": 0.28, "lr": a.lr, "beta1": 0.9,
         "beta2": 0.99, "grad_clip": 1.0, "trl_activation_checkpointing": False}
    items = vs.load_items(256)
    by_seed = []
    with tempfile.TemporaryDirectory(prefix="grpolab_real_trl_") as tmp:
        for k, seed in enumerate(range(a.trl_seeds)):
            # each seed its own prompts; the side that goes first alternates with the seed
            schedule = vs.prompt_schedule(len(items), a.trl_steps, a.prompts, seed)
            runs = {}
            for side in (("trl", "grpolab") if k % 2 == 0 else ("grpolab", "trl")):
                print(f"  vs_trl seed {seed}: {side}, {a.trl_steps} steps (load {bench.load_average()})", flush=True)
                if a.heap_bounded:  # each trainer under the allocator its users get (see main)
                    from grpolab.utils.heap import bound_heap, release_heap

                    release_heap()
                    bound_heap(TRL_MMAP_THRESHOLD if side == "trl" else None)
                if side == "trl":
                    runs[side] = vs.run_trl(model_dir, items, schedule, s, seed, Path(tmp) / f"s{seed}")
                else:
                    runs[side] = vs.run_grpolab(model_dir, items, schedule, s, seed, skip=False)
                print(f"    step s {[round(x, 1) for x in runs[side]['step_s']]}, "
                      f"mean length {[round(x, 1) for x in runs[side]['mean_length']]}", flush=True)
            by_seed.append({"seed": seed, "runs": runs, "load_after": bench.load_average()})
    # steps 2.. of every seed (step 1 is warm-up), pooled
    timed = {k: [x for r in by_seed for x in (r["runs"][k]["step_s"][1:] or r["runs"][k]["step_s"])]
             for k in ("trl", "grpolab")}
    lens = {k: statistics.fmean(x for r in by_seed for x in (r["runs"][k]["mean_length"][1:]
                                                              or r["runs"][k]["mean_length"]))
            for k in ("trl", "grpolab")}

    def med(key, side):
        return statistics.median(x for r in by_seed for x in (r["runs"][side][key][1:] or r["runs"][side][key]))

    ratio = statistics.median(timed["trl"]) / statistics.median(timed["grpolab"])
    per_seed = [statistics.median(r["runs"]["trl"]["step_s"][1:] or r["runs"]["trl"]["step_s"])
                / statistics.median(r["runs"]["grpolab"]["step_s"][1:] or r["runs"]["grpolab"]["step_s"])
                for r in by_seed]
    within = abs(lens["trl"] - lens["grpolab"]) <= 0.10 * max(lens.values())
    if a.heap_bounded:
        from grpolab.utils.heap import bound_heap

        bound_heap()
    return {"step_ratio": ratio,
            "malloc_mmap_threshold": {"trl": TRL_MMAP_THRESHOLD, "grpolab": a.heap_bounded} if a.heap_bounded else None, "step_ratio_by_seed": per_seed,
            "mean_len_grpolab": lens["grpolab"], "mean_len_trl": lens["trl"],
            "lengths_within_10pct": within, "verdict_applies": within,
            "median_step_s": {k: statistics.median(v) for k, v in timed.items()},
            "median_rollout_s": {k: med("rollout_s", k) for k in timed},
            "median_update_s": {k: med("update_s", k) for k in timed},
            "seeds": a.trl_seeds, "steps": a.trl_steps, "timed_steps_per_side": len(timed["trl"]),
            "max_new_tokens": T, "lr": a.lr, "task": "arith (plain-text prompts, both sides)",
            "by_seed": by_seed, "load_after": bench.load_average()}


# ------------------------------------------------------------------------------------------------
# 5. peak RSS

CHILD = r"""
import json, sys, torch
torch.set_num_threads(int(sys.argv[3]))
from grpolab.config import load_config
from grpolab.train import train
ov = json.loads(sys.argv[1])
train(load_config(overrides=ov), resume=sys.argv[2] == "resume", overwrite=sys.argv[2] == "fresh", log=lambda *_: None)
# this program's own peak: ru_maxrss would also count the parent's image at fork time
print("VmHWM_KiB", next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:")))
"""


def run_child(overrides: dict, mode: str, threads: int) -> dict:
    from grpolab.train.metrics_log import read_metrics

    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(overrides), mode, str(threads)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"training child ({mode}) failed:\n{out[-3000:]}")
    # the process's peak so far after each step (ru_maxrss at the step's end, logged by the trainer)
    by_step = {int(m["step"]): m["memory/peak_rss_mb"] / 1024 for m in read_metrics(overrides["trainer.run_dir"])
               if "memory/peak_rss_mb" in m}
    hwm = [int(line.split()[1]) for line in out.splitlines() if line.startswith("VmHWM_KiB ")]
    peak = hwm[-1] / 2**20 if hwm else usage.ru_maxrss / 2**20
    return {"peak_rss_gib": peak, "peak_rss_gib_after_step": by_step,
            "ru_maxrss_gib": usage.ru_maxrss / 2**20,  # counts the parent's image at fork (Linux)
            "seconds": time.perf_counter() - t, "load_after": bench.load_average()}


def part_rss(model_dir: Path, a) -> dict:
    from grpolab.models.testing import write_gsm8k_jsonl

    out = {}
    with tempfile.TemporaryDirectory(prefix="grpolab_real_rss_") as tmp:
        data = write_gsm8k_jsonl(Path(tmp) / "gsm8k.jsonl", n=60)
        base = {"model.path": str(model_dir), "task.name": "dataset",
                "task.options": {"path": str(data), "prompt_field": "question", "answer_field": "answer",
                                 "reward": "math"},
                "rollout.prompts_per_step": a.prompts, "rollout.group_size": a.group_size,
                "rollout.max_new_tokens": a.max_new_tokens, "trainer.save_every": 1, "trainer.eval_every": 1000,
                "trainer.preflight": False, "trainer.skip_zero_advantage": False, "log.progress": False}
        runs = {"lora_rlsd": {"credit.name": "rlsd", "model.lora": {"r": 16, "alpha": 32}, "optim.lr": 1e-5},
                "full_grpo": {"credit.name": "grpo", "optim.lr": 1e-6}}

        def one(name, extra):  # fresh, then resumed: in this order
            run_dir = str(Path(tmp) / name)
            # two steps fresh, so that the optimizer state exists during an update in both (a first
            # step allocates AdamW's moments only after its backward), then one more resumed
            for mode, steps in (("fresh", 2), ("resume", 3)):
                ov = {**base, **extra, "trainer.steps": steps, "trainer.run_dir": run_dir}
                res = run_child(ov, mode, a.rss_threads)
                key = name if mode == "fresh" else f"{name}_after_resume"
                if mode == "resume":  # the steps this process made (metrics.jsonl holds the fresh ones too)
                    res["peak_rss_gib_after_step"] = {k: v for k, v in res["peak_rss_gib_after_step"].items()
                                                      if k not in out[name]["peak_rss_gib_after_step"]}
                out[key] = res
                print(f"  peak RSS {key}: {res['peak_rss_gib']:.2f} GiB ({res['seconds']:.0f} s, load {bench.load_average()})",
                      flush=True)

        # the two configurations run side by side (each is its own process; memory does not mix)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(runs)) as pool:
            for f in [pool.submit(one, name, extra) for name, extra in runs.items()]:
                f.result()
    out["settings"] = {"prompts": a.prompts, "group_size": a.group_size, "max_new_tokens": a.max_new_tokens,
                       "threads": a.rss_threads, "side_by_side": True, "data": "GSM8K-format file, 60 rows",
                       "trainer": "2 steps fresh (checkpoints saved), then step 3 resumed from step 2's checkpoint; "
                                  "skip_zero_advantage off"}
    return out


# ------------------------------------------------------------------------------------------------


def merge(paths: list[Path], out: Path) -> int:
    from grpolab.utils.io import atomic_write_json

    parts = [json.loads(Path(p).read_text()) for p in paths]
    merged = dict(parts[0])
    merged["merged_from"] = [{"path": str(p), "started": d.get("started"), "finished": d.get("finished"),
                              "batch": d.get("batch"), "threads": d.get("threads"),
                              "parts": sorted(k for k in ("rollout", "update", "vs_trl", "peak_rss_gib") if k in d)}
                             for p, d in zip(paths, parts)]
    for d in parts[1:]:
        if d.get("model") != merged.get("model"):
            raise SystemExit(f"error: cannot merge runs of different models ({d.get('model')} vs {merged.get('model')})")
        for k in ("rollout", "update", "vs_trl", "peak_rss_gib", "peak_rss_runs"):
            if k in d:
                if k in merged and k not in ("peak_rss_runs",):
                    raise SystemExit(f"error: part {k!r} is in more than one file")
                merged[k] = d[k]
        merged["targets_met"] = {**merged.get("targets_met", {}), **d.get("targets_met", {})}
    atomic_write_json(out, merged)
    print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="a local HF causal-LM directory")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, help="join these result files into --out")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds of the rollout and update timings")
    ap.add_argument("--trl-steps", type=int, default=3, help="steps per trainer in the TRL comparison (1st = warm-up)")
    ap.add_argument("--trl-seeds", type=int, default=2, help="seeds of the TRL comparison (prompt order and sampling)")
    ap.add_argument("--trl-max-new-tokens", type=int, default=0,
                    help="max_new_tokens of the TRL comparison (default: --max-new-tokens)")
    ap.add_argument("--lr", type=float, default=1e-6, help="learning rate of the TRL comparison (both sides)")
    ap.add_argument("--rss-threads", type=int, default=1,
                    help="torch threads of each peak-RSS training child (the two run side by side)")
    ap.add_argument("--skip", default="", help=f"comma-separated parts to skip, from {PARTS}")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    if a.merge:
        return merge(a.merge, a.out)
    if a.model is None:
        ap.error("--model DIR is required (or --merge A.json B.json)")
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}
    if skip - set(PARTS):
        ap.error(f"--skip takes parts from {PARTS}, got {sorted(skip - set(PARTS))}")
    if not (a.model / "config.json").exists():
        ap.error(f"--model {a.model} is not a Hugging Face model directory (no config.json); "
                 "`grpolab models import smollm2-135m-instruct` writes one")
    torch.set_num_threads(a.threads)
    from grpolab.utils.heap import bound_heap

    # what `grpolab train` does first (grpolab.utils.heap): both sides of every comparison share it
    heap = bound_heap()
    a.heap_bounded = heap
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32).eval()
    cpu_flags = ""
    try:
        cpu_flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags"))
    except (OSError, StopIteration):
        pass
    result = {
        "model": str(a.model), "model_type": model.config.model_type, "params": bench.param_count(model),
        "threads": torch.get_num_threads(), "batch": {"prompts": a.prompts, "group_size": a.group_size,
                                                       "rows": a.prompts * a.group_size,
                                                       "max_new_tokens": a.max_new_tokens},
        "dtype": "float32", "malloc_mmap_threshold": heap,
        "machine": bench.machine(avx512_bf16="avx512_bf16" in cpu_flags, amx_bf16="amx_bf16" in cpu_flags),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load_at_start": bench.load_average(),
    }
    ceilings = [bench.matmul_gflops()]
    print(f"{result['model']}: {result['params'] / 1e6:.1f} M params, {a.threads} threads, "
          f"{a.prompts} x {a.group_size} rows, {a.max_new_tokens} new tokens; ceiling {ceilings[0]:.1f} GFLOP/s, "
          f"load {bench.load_average()}", flush=True)
    if "rollout" not in skip:
        result["rollout"] = part_rollout(model, tok, a, ceilings)
    if "update" not in skip:
        result["update"] = part_update(model, tok, a, ceilings)
    del model
    if "trl" not in skip:
        result["vs_trl"] = part_trl(a.model, a)
    if "rss" not in skip:
        rss = part_rss(a.model, a)
        result["peak_rss_gib"] = {k: v["peak_rss_gib"] for k, v in rss.items() if k != "settings"}
        result["peak_rss_runs"] = rss
    ceilings.append(bench.matmul_gflops())
    result["ceiling_gflops"] = max(ceilings)
    result["ceiling_gflops_all"] = ceilings
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    result["load_at_end"] = bench.load_average()
    targets = {}
    if "rollout" in result:
        ro = result["rollout"]
        targets["rollout_over_hf_ge_1.5"] = ro["grpolab_over_hf"] >= 1.5
        targets["rollout_share_of_floor_ge_0.5"] = ro["grpolab_share_of_floor"] >= 0.5
    if "vs_trl" in result:
        targets["trl_over_grpolab_ge_1.5"] = result["vs_trl"]["step_ratio"] >= 1.5 and result["vs_trl"]["verdict_applies"]
    if "peak_rss_gib" in result:
        p = result["peak_rss_gib"]
        targets["lora_rlsd_peak_rss_le_3gib"] = p["lora_rlsd"] <= 3.0
        targets["no_jump_after_resume"] = all(p[f"{k}_after_resume"] <= p[k] * 1.1 for k in ("lora_rlsd", "full_grpo"))
    result["targets_met"] = targets

    print(f"\n| measurement | value |\n|---|---|")
    print(f"| ceiling (1024^3 fp32 mm, highest reading) | {result['ceiling_gflops']:.1f} GFLOP/s |")
    if "rollout" in result:
        ro = result["rollout"]
        print(f"| rollout grpolab | {ro['grpolab_tokens_per_s']:.1f} tok/s |")
        print(f"| rollout HF generate | {ro['hf_generate_tokens_per_s']:.1f} tok/s |")
        print(f"| grpolab / HF | {ro['grpolab_over_hf']:.2f}x |")
        print(f"| FLOP floor | {ro['flop_floor_tokens_per_s']:.1f} tok/s (grpolab at {100 * ro['grpolab_share_of_floor']:.0f}%) |")
    if "update" in result:
        for k in ("full", "lora"):
            u = result["update"][k]
            print(f"| update {k} | {u['tokens_per_s']:.1f} tok/s, {100 * u['share_of_ceiling']:.0f}% of ceiling |")
    if "vs_trl" in result:
        v = result["vs_trl"]
        print(f"| TRL / grpolab s/step | {v['step_ratio']:.2f}x (per seed "
              f"{', '.join(f'{x:.2f}' for x in v['step_ratio_by_seed'])}; mean lengths {v['mean_len_trl']:.1f} vs "
              f"{v['mean_len_grpolab']:.1f}) |")
    for k, v in result.get("peak_rss_gib", {}).items():  # noqa: B007
        steps = result["peak_rss_runs"][k].get("peak_rss_gib_after_step", {})
        print(f"| peak RSS {k} | {v:.2f} GiB (after each step: "
              f"{', '.join(f'{n}: {x:.2f}' for n, x in sorted(steps.items()))}) |")
    print(f"targets: {targets}")
    from grpolab.utils.io import atomic_write_json

    atomic_write_json(a.out, result)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
