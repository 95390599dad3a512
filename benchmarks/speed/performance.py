"""Where the time of a GRPO step goes, and how fast the hardware could go (issue "the evidence").

Three parts, all in one process so that the ratios compare like with like:

1. **Matmul throughput** of this machine, measured now: the best of a few ``torch.mm`` sizes in
   float32 with torch's current thread count (the ceiling the update phase is compared against),
   plus the throughput of matmuls shaped like the default model's (``[tokens, 192] x [192, 512]``).
2. **The default config, phase by phase**: the default warm-started model (``--model``; built
   with the default warm start and cached in ``--cache`` when not given), the default batch
   (32 prompts x 8 samples, at most 48 new tokens, temperature 1), timed over ``--steps`` steps
   through grpolab's own pieces in the loop's order: rollout and reward (the run's collector,
   ``collector_for``), advantages,
   update (``grpolab.train.update``: forward + backward + AdamW over micro-batches, zero-advantage
   rows skipped as by default). Reported: seconds per step and per phase, the fraction of step
   time in each phase, tokens per second for rollout (generated tokens) and update (tokens
   through forward + backward), the update's FLOP rate as a fraction of the measured matmul
   ceiling (MFU), the time of the objective alone (``policy_loss`` forward + backward on the
   step's ``[B, T]`` tensors, no model) as a fraction of step time, and peak resident memory.
3. **Scaling**: seconds per step (rollout + update) as group size, response length and model
   width grow. These use a randomly initialised model with EOS disabled, so every response has
   exactly ``max_new_tokens`` tokens, and Bernoulli(0.5) rewards, so every group carries signal:
   the work per step is controlled, not left to what a trained model happens to write.

FLOPs of a forward over a sequence of ``n`` tokens: ``2 * N_linear * n`` for the linear layers
(attention projections, MLP, LM head) plus ``4 * d * n(n+1)/2`` per layer for the causal
attention scores and their weighted sum; backward = 2 x forward. Only real (non-padding) tokens
of the rows that go through the update are counted (useful FLOPs, the usual MFU convention).

Run::

    python benchmarks/speed/performance.py [--model WARM_DIR] [--steps 5] [--out PATH]
    python benchmarks/speed/performance.py --model WARM_DIR --micro-batch-budgets 2048 4096 8192 16384

Prints tables and writes ``runs/bench/performance.json`` (the second form: the update's
throughput against ``trainer.micro_batch_tokens``, ``runs/bench/micro_batch.json``).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from pathlib import Path

import torch


from grpolab import objectives as obj
from grpolab.config import load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, load_model, save_model
from grpolab.rollout import Experience
from grpolab.train import UpdateSpec, policy_update, update
from grpolab.tasks import PromptFormat
from grpolab.rollout.collector import collector_for
from grpolab.train.optim import build_optimizer, build_scheduler
from grpolab.train.setup import build_task_splits
from grpolab.train.warm_start import sft_from_config
from grpolab import bench
from grpolab.utils.io import atomic_write_json


# ---------------------------------------------------------------------------------------------
# 1. the machine's matmul ceiling


# ---------------------------------------------------------------------------------------------
# FLOP accounting


def forward_flops(model, lengths: list[int]) -> float:
    cfg = model.config
    n_lin = bench.linear_param_count(model)
    d, L = cfg.hidden_size, cfg.num_hidden_layers
    return float(sum(2 * n_lin * n + L * 4 * d * n * (n + 1) / 2 for n in lengths))


class TokenCounter:
    """Wraps the update's ``response_logprobs`` to record the real sequence lengths of every forward."""

    def __init__(self) -> None:
        self.lengths: list[int] = []
        self._orig = policy_update.response_logprobs

    def __enter__(self):
        def counted(model, batch, **kw):
            if model.training:  # the update's forwards (not old/ref log-prob passes)
                lens = (batch.prompt_mask.sum(-1) + batch.response_mask.sum(-1)).long().tolist()
                self.lengths += lens
            return self._orig(model, batch, **kw)

        policy_update.response_logprobs = counted
        return self

    def __exit__(self, *exc):
        policy_update.response_logprobs = self._orig


# ---------------------------------------------------------------------------------------------
# one step, in the loop's order


def one_step(policy, tokenizer, optimizer, scheduler, items, cfg, gen, *, eos=True, rewards_fn=None):
    """One training step as the trainer takes it: the run's collector samples and scores (``eos=False``:
    no stop token, every response runs to the cap), then the update; ``rewards_fn(B)`` replaces the
    verifier's rewards (the scaling runs' coin flips)."""
    collector = collector_for(cfg, tokenizer, prompt_format=PromptFormat(chat_template="off"),
                              stop_ids=None if eos else [])
    t0 = time.perf_counter()
    exp = collector.collect(policy, items, group_size=cfg.rollout.group_size, temperature=cfg.rollout.temperature,
                            top_p=cfg.rollout.top_p, generator=gen)
    rollout = exp.rollout
    t1 = t0 + exp.seconds["rollout"]
    rewards = exp.rewards if rewards_fn is None else rewards_fn(len(rollout))
    t2 = time.perf_counter()
    advantages = obj.get_advantage_estimator(cfg.objective.advantage)(rewards, rollout.group_ids)
    with TokenCounter() as counter:
        stats = update(policy, optimizer, scheduler, Experience.from_rollout(rollout, advantages),
                       UpdateSpec.from_config(cfg))
    t3 = time.perf_counter()
    return {
        "rollout_s": t1 - t0, "reward_s": t2 - t1, "update_s": t3 - t2, "step_s": t3 - t0,
        "generated_tokens": int(rollout.response_mask.sum()),
        "update_tokens": sum(counter.lengths), "update_flops": 3 * forward_flops(policy, counter.lengths),
        "skipped_rows_frac": stats["skipped_rows_frac"],
        "shape": list(rollout.response_mask.shape), "rollout": rollout, "advantages": advantages,
    }


def objective_seconds(rollout, advantages, cfg, repeats: int = 5) -> float:
    """``policy_loss`` forward + backward alone on the step's tensors (no model)."""
    mask = rollout.response_mask
    o = cfg.objective
    times = []
    for _ in range(repeats):
        logp = (rollout.sample_logp + 0.01 * torch.randn_like(mask)).requires_grad_(True)
        t0 = time.perf_counter()
        W = obj.aggregation_weights(mask, o.aggregation, advantages=advantages, group_ids=rollout.group_ids,
                                    max_len=cfg.rollout.max_new_tokens)
        loss, _ = obj.policy_loss(logp, rollout.sample_logp, advantages, mask, group_ids=rollout.group_ids,
                                  ratio=o.ratio, clip_low=o.clip_low, clip_high=o.clip_high,
                                  dual_clip=o.dual_clip, clip_power=o.clip_power,
                                  max_len=cfg.rollout.max_new_tokens, weights=W)
        loss.backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed_steps(policy, tokenizer, cfg, items, *, steps: int, eos=True, rewards_fn=None, seed=0):
    optimizer = build_optimizer(policy, lr=cfg.optim.lr, weight_decay=0.0, betas=(0.9, 0.99))
    scheduler = build_scheduler(optimizer, warmup_steps=0, total_steps=steps + 1, schedule="constant")
    gen = torch.Generator().manual_seed(seed)
    P = cfg.rollout.prompts_per_step
    out = []
    for s in range(steps + 1):  # step 0 is warm-up, not reported
        batch = [items[(s * P + i) % len(items)] for i in range(P)]
        r = one_step(policy, tokenizer, optimizer, scheduler, batch, cfg, gen, eos=eos, rewards_fn=rewards_fn)
        if s > 0:
            out.append(r)
    return out


def median(rows, key):
    return statistics.median(r[key] for r in rows)


# ---------------------------------------------------------------------------------------------


def default_model(cache: Path):
    cfg = load_config()
    if (cache / "config.json").exists():
        return load_model(cache)
    print(f"building the default warm start once into {cache} ...", flush=True)
    train_items, eval_items = build_task_splits(cfg.task, seed=0)
    tok = build_tokenizer()
    model = build_tiny_model(tok, seed=0)
    sft_from_config(cfg, model, tok, train_items, eval_items, log=lambda s: None)
    save_model(model, tok, cache)
    return model, tok


def bernoulli_rewards(seed: int):
    g = torch.Generator().manual_seed(seed)
    return lambda n: torch.bernoulli(torch.full((n,), 0.5), generator=g)


def scaling(cfg_overrides: dict, width: int, items, steps: int) -> dict:
    cfg = load_config(overrides={"trainer.skip_zero_advantage": "false", **cfg_overrides})
    tok = build_tokenizer()
    heads = 4
    inter = int(round(width * 8 / 3 / 64)) * 64
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=width, num_attention_heads=heads,
                                                  intermediate_size=inter), seed=0)
    rows = timed_steps(model, tok, cfg, items, steps=steps, eos=False, rewards_fn=bernoulli_rewards(0))
    return {
        "params": bench.param_count(model), "step_s": median(rows, "step_s"),
        "rollout_s": median(rows, "rollout_s"), "update_s": median(rows, "update_s"),
        "update_tokens_per_s": median(rows, "update_tokens") / median(rows, "update_s"),
    }


def micro_batch_sweep(args) -> None:
    """The update phase of the default config (forward + backward + AdamW over one rollout batch)
    against the micro-batch token budget (``trainer.micro_batch_tokens``): every budget in each of
    ``--rounds`` interleaved rounds (a noisy machine affects every budget alike), from the same
    weights; useful GFLOP/s as above. (This was benchmarks/micro_batch.py, which loaded this script.)"""
    policy, tok = load_model(args.model) if args.model else default_model(Path(args.cache))
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    rows: dict[int, list[dict]] = {b: [] for b in args.micro_batch_budgets}
    for rnd in range(args.rounds):
        for budget in args.micro_batch_budgets:
            cfg = load_config(overrides={"trainer.micro_batch_tokens": str(budget)})
            items, _ = build_task_splits(cfg.task, seed=0)
            policy.load_state_dict(start)  # every budget starts from the same weights
            steps = timed_steps(policy, tok, cfg, items, steps=args.steps)
            update_s = median(steps, "update_s")
            gflops = median(steps, "update_flops") / update_s / 1e9
            rows[budget].append({"update_s": update_s, "gflops": gflops})
            print(f"round {rnd}  budget {budget:6d}  update {update_s:.3f} s  {gflops:.1f} GFLOP/s", flush=True)
    summary = {b: {"median_update_s": statistics.median(r["update_s"] for r in rs),
                   "median_gflops": statistics.median(r["gflops"] for r in rs)} for b, rs in rows.items()}
    print("\n| micro_batch_tokens | update s (median) | useful GFLOP/s (median) |\n|---|---|---|")
    for b, r in summary.items():
        print(f"| {b} | {r['median_update_s']:.3f} | {r['median_gflops']:.1f} |")
    out = args.out or str(bench.results_path("micro_batch.json"))
    bench.write_json(out, {"rounds": rows, "summary": summary, "machine": bench.machine()})
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="warm-started model dir (default: build and cache one)")
    ap.add_argument("--cache", default=str(bench.results_path("warm_default")))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--scaling-steps", type=int, default=2)
    ap.add_argument("--micro-batch-budgets", type=int, nargs="+", default=None, metavar="TOKENS",
                    help="instead of the report: the update's throughput at each trainer.micro_batch_tokens "
                         "(e.g. 2048 4096 8192 16384), in --rounds interleaved rounds (runs/bench/micro_batch.json)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of --micro-batch-budgets")
    ap.add_argument("--out", default=None, help="results JSON (default: runs/bench/performance.json, or "
                                                "runs/bench/micro_batch.json with --micro-batch-budgets)")
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.micro_batch_budgets:
        micro_batch_sweep(args)
        return
    args.out = args.out or str(bench.results_path("performance.json"))

    # 1. the ceiling
    sizes = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)]
    peak = {f"{m}x{k}x{n}": bench.matmul_gflops(m, k, n, seconds=1.0) for m, k, n in sizes}
    ceiling = max(peak.values())
    model_shaped = bench.matmul_gflops(2048, 192, 512, seconds=1.0)
    print(f"\nmatmul float32, {torch.get_num_threads()} threads: "
          + ", ".join(f"{k}: {v:.1f} GFLOP/s" for k, v in peak.items())
          + f"; model-shaped 2048x192x512: {model_shaped:.1f} GFLOP/s; ceiling = {ceiling:.1f}")

    # 2. the default config
    cfg = load_config()
    train_items, _ = build_task_splits(cfg.task, seed=0)
    if args.model:
        policy, tok = load_model(args.model)
    else:
        policy, tok = default_model(Path(args.cache))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rows = timed_steps(policy, tok, cfg, train_items, steps=args.steps)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    obj_s = objective_seconds(rows[-1]["rollout"], rows[-1]["advantages"], cfg)
    step = median(rows, "step_s")
    d = {
        "step_s": step, "rollout_s": median(rows, "rollout_s"), "reward_s": median(rows, "reward_s"),
        "update_s": median(rows, "update_s"), "objective_s": obj_s,
        "rollout_tokens_per_s": median(rows, "generated_tokens") / median(rows, "rollout_s"),
        "update_tokens_per_s": median(rows, "update_tokens") / median(rows, "update_s"),
        "update_gflops_per_s": median(rows, "update_flops") / median(rows, "update_s") / 1e9,
        "skipped_rows_frac": median(rows, "skipped_rows_frac"),
        "peak_rss_mb": rss1 / 1024, "peak_rss_before_steps_mb": rss0 / 1024,
        "steps": [{k: v for k, v in r.items() if k not in ("rollout", "advantages")} for r in rows],
    }
    d["mfu_update"] = d["update_gflops_per_s"] / ceiling
    d["objective_frac_of_step"] = obj_s / step
    print(f"\ndefault config ({cfg.rollout.prompts_per_step}x{cfg.rollout.group_size}, "
          f"{cfg.rollout.max_new_tokens} new tokens), median of {args.steps} steps")
    print("| phase | seconds | share of step | tokens/s |")
    print("|---|---|---|---|")
    print(f"| rollout | {d['rollout_s']:.3f} | {d['rollout_s'] / step:.0%} | {d['rollout_tokens_per_s']:.0f} generated |")
    print(f"| reward | {d['reward_s']:.3f} | {d['reward_s'] / step:.0%} | |")
    print(f"| update | {d['update_s']:.3f} | {d['update_s'] / step:.0%} | {d['update_tokens_per_s']:.0f} fwd+bwd |")
    print(f"| (objective alone) | {obj_s:.4f} | {d['objective_frac_of_step']:.1%} | |")
    print(f"| step | {step:.3f} | 100% | |")
    print(f"update: {d['update_gflops_per_s']:.1f} GFLOP/s useful = {d['mfu_update']:.1%} of the "
          f"{ceiling:.1f} GFLOP/s matmul ceiling ({d['skipped_rows_frac']:.0%} of rows skipped: zero advantage); "
          f"peak RSS {d['peak_rss_mb']:.0f} MB")

    # 3. scaling
    base = {"rollout.prompts_per_step": 16, "rollout.group_size": 8, "rollout.max_new_tokens": 48}
    scale: dict[str, dict] = {"group_size": {}, "max_new_tokens": {}, "width": {}}
    for g in (4, 8, 16):
        scale["group_size"][g] = scaling({**base, "rollout.group_size": g}, 192, train_items, args.scaling_steps)
    for t in (24, 48, 96):
        scale["max_new_tokens"][t] = scaling({**base, "rollout.max_new_tokens": t}, 192, train_items, args.scaling_steps)
    for w in (128, 192, 256, 384):
        scale["width"][w] = scaling(base, w, train_items, args.scaling_steps)
    print("\nscaling (random-init model, no EOS, Bernoulli rewards; 16 prompts, G=8, 48 tokens, width 192 "
          "unless varied)")
    for axis, res in scale.items():
        print(f"\n| {axis} | params | step s | rollout s | update s | update tok/s |")
        print("|---|---|---|---|---|---|")
        for k, r in res.items():
            print(f"| {k} | {r['params']:,} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['update_s']:.2f} | "
                  f"{r['update_tokens_per_s']:.0f} |")

    out = {
        "machine": bench.machine(),
        "matmul_gflops": peak, "matmul_model_shaped_gflops": model_shaped, "ceiling_gflops": ceiling,
        "default": d, "scaling": {a: {str(k): v for k, v in r.items()} for a, r in scale.items()},
    }
    atomic_write_json(args.out, out)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
