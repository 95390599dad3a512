"""One decode step of the tiny default model at batch 64: time, FLOP floor, and where the time goes.

The setting: grpolab's tiny Llama (``TinyModelConfig()`` defaults: hidden 192, 4 layers, 4 heads,
MLP 512, vocab 66), 8 prompts x group 8 = 64 rows, 12..19 prompt tokens, 48 new tokens without EOS
(every row decodes every step), temperature 1. Two decoders, interleaved ``--repeats`` times:

* ``fused``: :class:`grpolab.rollout.decode_step.FusedLlamaDecoder` (``sample(..., fused=True)``,
  the default);
* ``hf``: the model's own Hugging Face ``forward`` per step (``sample(..., fused=False)``).

Per-step time = (time of ``sample`` with 49 new tokens - time with 1 new token) / 48: the
prefill, setup and first sampling cancel, what is left is 48 x (forward of one token + sampling
+ bookkeeping). The FLOP floor of a step is its FLOPs (``2 x`` the multiply-adds of every linear
layer and the LM head for 64 tokens, plus ``4 b H D L`` per layer for attention over the ``L``
cached keys, averaged over the run) divided by a matmul throughput measured in the same run:
``floor_peak`` at the 1024^3 ``torch.mm`` rate, ``floor_shapes`` at the rate of the step's own GEMM
shapes (``[64, 192] x [192, 576]`` and so on, each timed alone). ``torch.profiler`` then gives the
self CPU time per op for one run of each decoder (the breakdown in docs/performance.md).

Run:  python benchmarks/speed/decode_step.py [--repeats 7] [--threads N]
Writes runs/bench/decode_step.json (atomically).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import sample
from grpolab import bench
from grpolab.utils.io import atomic_write_json

RESULTS = bench.results_path("decode_step.json")
N_PROMPTS, GROUP, NEW = 8, 8, 48


def setup():
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(), seed=0).eval()
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(12, 20, (N_PROMPTS,), generator=g).tolist()
    prompts = [[tok.bos_token_id] + torch.randint(5, len(tok), (n - 1,), generator=g).tolist() for n in lengths]
    return model, tok, prompts


def run(model, tok, prompts, new_tokens: int, fused: bool):
    g = torch.Generator().manual_seed(0)
    return sample(model, prompts, group_size=GROUP, max_new_tokens=new_tokens, eos_token_id=None,
                  pad_token_id=tok.pad_token_id, generator=g, fused=fused)


def step_ms(model, tok, prompts, fused: bool) -> float:
    t0 = time.perf_counter()
    run(model, tok, prompts, 1, fused)
    t1 = time.perf_counter()
    run(model, tok, prompts, NEW + 1, fused)
    t2 = time.perf_counter()
    return ((t2 - t1) - (t1 - t0)) / NEW * 1e3



def step_flops(model, prompts) -> dict:
    cfg = model.config
    b, d, inter, V, nl = N_PROMPTS * GROUP, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size, cfg.num_hidden_layers
    H = cfg.num_attention_heads
    Hk = cfg.num_key_value_heads or H
    D = d // H
    P = max(len(p) for p in prompts)
    mean_L = statistics.fmean(P + t + 1 for t in range(NEW))  # keys attended per step (incl. left padding)
    shapes = [(b, d, (H + 2 * Hk) * D), (b, H * D, d), (b, d, 2 * inter), (b, inter, d)]  # per layer
    linear = nl * sum(2 * m * k * n for m, k, n in shapes) + 2 * b * d * V
    attention = nl * 4 * b * H * D * mean_L
    return {"linear": linear, "attention": attention, "total": linear + attention, "gemm_shapes_per_layer": shapes,
            "head_shape": (b, d, V), "mean_kv_length": mean_L}


def profile(model, tok, prompts, fused: bool, top: int = 18) -> list[dict]:
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as prof

    run(model, tok, prompts, 4, fused)
    with prof(activities=[ProfilerActivity.CPU]) as p:
        run(model, tok, prompts, NEW + 1, fused)
    rows = sorted(p.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in rows)
    return [{"op": e.key, "calls_per_step": e.count / (NEW + 1), "self_ms_per_step": e.self_cpu_time_total / 1e3 / (NEW + 1),
             "share": e.self_cpu_time_total / total} for e in rows[:top]] + [
        {"op": "(all ops)", "self_ms_per_step": total / 1e3 / (NEW + 1), "calls_per_step":
         sum(e.count for e in rows) / (NEW + 1), "share": 1.0}]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--no-profile", action="store_true")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    if a.repeats < 1:
        p.error("--repeats must be >= 1")
    if a.threads:
        torch.set_num_threads(a.threads)
    model, tok, prompts = setup()
    fl = step_flops(model, prompts)
    for fused in (True, False):  # warm-up
        run(model, tok, prompts, 4, fused)
    times = {"fused": [], "hf": []}
    peak, shape_rates = [], []
    for _ in range(a.repeats):  # interleaved: machine load hits all measurements alike
        peak.append(bench.matmul_gflops(1024, 1024, 1024, seconds=0.2))
        for name, fused in (("fused", True), ("hf", False)):
            times[name].append(step_ms(model, tok, prompts, fused))
        shapes = fl["gemm_shapes_per_layer"]
        t_gemm = sum(2 * m * k * n / (bench.matmul_gflops(m, k, n, seconds=0.05) * 1e9) for m, k, n in shapes) * model.config.num_hidden_layers
        m, k, n = fl["head_shape"]
        t_gemm += 2 * m * k * n / (bench.matmul_gflops(m, k, n, seconds=0.05) * 1e9)
        shape_rates.append(fl["linear"] / t_gemm / 1e9)
    peak_rate, shape_rate = statistics.median(peak), statistics.median(shape_rates)
    res = {
        "machine": bench.machine(),
        "setting": {"rows": N_PROMPTS * GROUP, "new_tokens": NEW, "model": "TinyModelConfig()",
                    "prompt_lengths": [len(x) for x in prompts]},
        "flops_per_step": fl,
        "mm_1024_gflops": peak, "step_gemm_shapes_gflops": shape_rates,
        "floor_peak_ms": fl["total"] / (peak_rate * 1e9) * 1e3,
        "floor_shapes_ms": fl["total"] / (shape_rate * 1e9) * 1e3,
        "step_ms": times,
    }
    med = {k: statistics.median(v) for k, v in times.items()}
    res["median_step_ms"] = med
    res["fused_over_floor_peak"] = med["fused"] / res["floor_peak_ms"]
    res["fused_over_floor_shapes"] = med["fused"] / res["floor_shapes_ms"]
    res["hf_over_fused"] = med["hf"] / med["fused"]
    if not a.no_profile:
        res["profile"] = {"fused": profile(model, tok, prompts, True), "hf": profile(model, tok, prompts, False)}
    print(f"decode step, batch {N_PROMPTS * GROUP}, tiny default model, torch threads {torch.get_num_threads()}, "
          f"load average {bench.load_average()}; {a.repeats} interleaved repeats")
    print(f"FLOPs per step {fl['total'] / 1e6:.1f} M (linear {fl['linear'] / 1e6:.1f} M, attention "
          f"{fl['attention'] / 1e6:.1f} M); matmul 1024^3 {peak_rate:.1f} GFLOP/s, the step's GEMM shapes "
          f"{shape_rate:.1f} GFLOP/s -> floor {res['floor_peak_ms']:.2f} ms (peak) / {res['floor_shapes_ms']:.2f} ms (shapes)")
    for k, v in times.items():
        print(f"  {k:<6} median {med[k]:6.2f} ms/step   all: {[round(x, 2) for x in v]}")
    print(f"fused: {res['fused_over_floor_peak']:.2f}x the peak floor, {res['fused_over_floor_shapes']:.2f}x the "
          f"shape floor; HF forward / fused {res['hf_over_fused']:.2f}x")
    for name, rows in res.get("profile", {}).items():
        print(f"profile ({name}), self CPU ms per step:")
        for r in rows:
            print(f"  {r['op']:<52} {r['calls_per_step']:7.1f} calls {r['self_ms_per_step']:7.3f} ms {100 * r['share']:5.1f}%")
    atomic_write_json(a.out, res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
