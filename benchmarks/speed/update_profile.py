"""Where the update's time goes: one fixed batch, the shared-prompt forward vs the joint forward.

The setting of ``benchmarks/speed/vs_trl.py``: grpolab's tiny Llama (``TinyModelConfig()`` defaults),
16 prompts of 6..9 tokens x group 8 = 128 completions of at most 48 tokens sampled once (temperature
1, EOS on), Bernoulli(0.5) rewards, group-normalised advantages, ``grpolab.train.update`` with
skipping off (every row goes through forward + backward), token-level loss, one AdamW step,
micro-batches of at most 2048 padded tokens. Two variants, interleaved ``--repeats`` times:

* ``shared``: ``trainer.share_prompts`` on (the default): each distinct prompt of a micro-batch is
  forwarded once, the responses on its KV cache;
* ``joint``: one forward over ``[prompt; response]`` per row (what TRL computes).

Reported: the median update seconds of each and their ratio; the tokens each forwards (padding
included, from the micro-batch partition) and the FLOPs that implies (``2 x`` the linear layers'
multiply-adds per forwarded token, backward = 2 x forward); the achieved GFLOP/s against a
``torch.mm`` rate measured in the same run at the model's MLP shape; and a ``torch.profiler``
breakdown of one update of each (self CPU time: matmuls, attention, elementwise, optimizer, the
rest), the table in docs/performance.md.

Run:  python benchmarks/speed/update_profile.py [--repeats 5]
Writes runs/bench/update_profile.json (atomically).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time
from pathlib import Path

import torch

from grpolab import objectives as obj
from grpolab.config import ObjectiveConfig
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import sample
from grpolab.rollout.logprobs import distinct_prompts
from grpolab.rollout import Experience
from grpolab.train import UpdateSpec, update
from grpolab.train.policy_update import LossSpec, micro_batches
from grpolab import bench
from grpolab.utils.io import atomic_write_json

RESULTS = bench.results_path("update_profile.json")
N_PROMPTS, GROUP, NEW = 16, 8, 48

#: profiler op-name fragments per category (first match wins)
CATEGORIES = (
    ("matmul (linear layers, LM head)", ("aten::mm", "aten::addmm", "aten::bmm")),
    ("attention (SDPA forward + backward)", ("scaled_dot_product", "flash_attention")),
    # AdamW on the CPU runs per-tensor mul_/add_/addcmul_/lerp_: its arithmetic lands in "elementwise"
    ("optimizer own time (AdamW step, grad-norm)", ("Optimizer.step", "_foreach", "clip_grad", "aten::norm",
                                                  "linalg_vector_norm")),
    ("elementwise (norms, RoPE, SiLU, residuals, copies)", (
        "aten::mul", "aten::add", "aten::silu", "aten::pow", "aten::mean", "aten::rsqrt", "aten::neg", "aten::cat",
        "aten::copy_", "aten::div", "aten::sub", "aten::fill_", "aten::sum", "aten::where", "aten::exp",
        "aten::softmax", "aten::_softmax", "aten::logsumexp", "aten::gather", "aten::index", "aten::embedding",
        "aten::clamp", "aten::minimum", "aten::maximum", "aten::threshold", "aten::zero_", "aten::masked_fill",
        "aten::_log_softmax", "aten::scatter", "aten::sigmoid", "aten::ne", "aten::eq", "aten::gt", "aten::lt",
        "aten::ge", "aten::le", "aten::abs", "aten::sqrt", "aten::lerp", "aten::addcmul", "aten::addcdiv")),
)


def setup(seed: int = 0):
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(), seed=0)
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(6, 10, (N_PROMPTS,), generator=g).tolist()
    prompts = [[tok.bos_token_id] + torch.randint(5, len(tok), (n - 1,), generator=g).tolist() for n in lengths]
    rollout = sample(model.eval(), prompts, group_size=GROUP, max_new_tokens=NEW, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed + 1))
    rewards = torch.bernoulli(torch.full((rollout.batch_size,), 0.5), generator=g)
    adv = obj.get_advantage_estimator("grpo")(rewards, rollout.group_ids)
    return model, Experience.from_rollout(rollout, adv)


def forwarded_tokens(exp: Experience, budget: int) -> dict:
    """Tokens each variant pushes through the layers, padding included, from the micro-batch partition."""
    r = exp.rollout
    lengths = r.attention_mask.sum(-1).long()
    joint = shared = 0
    parts = micro_batches(torch.arange(r.batch_size), lengths, 0, budget)
    for idx in parts:
        pm, rm = r.prompt_mask[idx], r.response_mask[idx]
        P = int(pm.shape[1] - pm.bool().any(0).long().argmax())  # after trimming all-padding columns
        T = int(rm.bool().any(0).nonzero().max()) + 1
        N = distinct_prompts(r.prompt_ids[idx], pm)[0].shape[0]
        joint += len(idx) * (P + T)
        shared += N * P + len(idx) * (T - 1) if N < len(idx) else len(idx) * (P + T)
    return {"micro_batches": len(parts), "joint": joint, "shared": shared,
            "real_tokens": int(lengths.sum()), "response_tokens": int(r.response_mask.sum())}


def linear_params(model) -> int:
    return sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n)



def categorize(prof) -> dict:
    out = {name: 0.0 for name, _ in CATEGORIES}
    out["other (dispatch, views, autograd bookkeeping)"] = 0.0
    total = 0.0
    for e in prof.key_averages():
        us = e.self_cpu_time_total
        total += us
        for name, frags in CATEGORIES:
            if any(f in e.key for f in frags):
                out[name] += us
                break
        else:
            out["other (dispatch, views, autograd bookkeeping)"] += us
    return {"total_ms": total / 1e3, "ms": {k: v / 1e3 for k, v in out.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    torch.set_num_threads(a.threads)
    model, exp = setup()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.99), weight_decay=0.0)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    base = UpdateSpec(loss=LossSpec(objective=ObjectiveConfig(clip_low=0.2, clip_high=0.28, dual_clip=None), max_len=NEW),
                      skip_zero_advantage=False)
    specs = {"shared": base, "joint": dataclasses.replace(base, share_prompts=False)}
    for spec in specs.values():  # warm-up
        update(model, opt, sch, exp, spec)
    times = {k: [] for k in specs}
    rates = []
    for r in range(a.repeats):
        rates.append(bench.matmul_gflops(2048, 192, 512, reps=20, warmup=3))
        for k in (specs if r % 2 == 0 else list(specs)[::-1]):
            t = time.perf_counter()
            update(model, opt, sch, exp, specs[k])
            times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    toks = forwarded_tokens(exp, base.micro_batch_tokens)
    n_lin = linear_params(model)
    rate = statistics.median(rates)
    flops = {k: 6 * n_lin * toks[k] for k in specs}  # forward 2 N per token, backward 4 N
    from torch.profiler import ProfilerActivity, profile

    breakdown = {}
    for k, spec in specs.items():
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            update(model, opt, sch, exp, spec)
        breakdown[k] = categorize(prof)
    res = {
        "machine": bench.machine(),
        "setting": {"prompts": N_PROMPTS, "group": GROUP, "max_new_tokens": NEW, "rows": exp.batch_size,
                    "micro_batch_tokens": base.micro_batch_tokens, "linear_params": n_lin},
        "update_s": times, "median_update_s": med, "ratio_joint_over_shared": med["joint"] / med["shared"],
        "forwarded_tokens": toks, "linear_flops": flops, "mm_gflops_per_s_at_2048x192x512": rate,
        "achieved_gflops_per_s": {k: flops[k] / med[k] / 1e9 for k in specs},
        "floor_s": {k: flops[k] / rate / 1e9 for k in specs},
        "profile": breakdown,
    }
    print(f"{exp.batch_size} rows, {toks['real_tokens']} real tokens ({toks['response_tokens']} response), "
          f"{toks['micro_batches']} micro-batches; torch threads {torch.get_num_threads()}, "
          f"load {res['machine']['loadavg']}")
    print(f"{'variant':<8} {'median s':>9} {'forwarded tok':>13} {'GFLOP':>7} {'GFLOP/s':>8} {'x floor':>8}")
    for k in specs:
        print(f"{k:<8} {med[k]:>9.3f} {toks[k]:>13} {flops[k] / 1e9:>7.1f} {res['achieved_gflops_per_s'][k]:>8.1f} "
              f"{med[k] / res['floor_s'][k]:>8.2f}")
    print(f"joint / shared: {res['ratio_joint_over_shared']:.3f}x (tokens {toks['joint'] / toks['shared']:.3f}x); "
          f"mm rate {rate:.1f} GFLOP/s")
    for k, b in breakdown.items():
        print(f"profile {k}: total {b['total_ms']:.0f} ms: " + ", ".join(
            f"{name} {ms:.0f} ms ({100 * ms / b['total_ms']:.0f}%)" for name, ms in b["ms"].items()))
    atomic_write_json(a.out, res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
