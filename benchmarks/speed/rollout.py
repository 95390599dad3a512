"""Rollout speed: grpolab.rollout.sample vs Hugging Face ``model.generate(do_sample=True)``.

The setting of a GRPO step on the tiny default model: a ~1.8M-parameter Llama (hidden 192, 4
layers, 4 heads, MLP 512, vocab 48), 32 prompts x group 8 = 256 sequences, up to 48 new tokens,
temperature 1, no top-p. The HF side is called the way TRL's GRPOTrainer calls it: prompts
repeated ``G`` times in the batch, left-padded, ``GenerationConfig(do_sample=True, top_k=0,
top_p=1, temperature=1, ...)``.

Two scenarios:
  * ``eos``: EOS id 2 (a random model stops at ~1/48 per token, so lengths vary like an RL batch);
  * ``fixed``: no EOS, every row runs 48 tokens (pure decode throughput).

"tokens" = generated tokens up to and including EOS (padding after EOS is not counted). Each
measurement is the median of ``--repeats`` runs, the two samplers interleaved so that machine load
hits both alike. For context it also times HF generate followed by the teacher-forced forward
that TRL needs for the sampling log-probs (``sample`` returns them for free).

Run:  python benchmarks/speed/rollout.py [--repeats 5] [--threads N]
Writes runs/bench/rollout.json (atomically).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from grpolab.rollout import left_pad, response_logprobs, sample
from grpolab import bench
from grpolab.utils.io import atomic_write_json

VOCAB, PAD, BOS, EOS = 48, 0, 1, 2
N_PROMPTS, GROUP, MAX_NEW = 32, 8, 48
RESULTS = bench.results_path("rollout.json")


def build_model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=192, num_hidden_layers=4, num_attention_heads=4,
        intermediate_size=512, max_position_embeddings=256, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
    )
    return LlamaForCausalLM(cfg).eval()


def build_prompts(seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(8, 25, (N_PROMPTS,), generator=g)
    return [[BOS] + torch.randint(3, VOCAB, (int(n) - 1,), generator=g).tolist() for n in lengths]


def _timed(fn):
    """(wall seconds, process CPU seconds, result)."""
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out



def run_ours(model, prompts, eos, seed):
    g = torch.Generator().manual_seed(seed)
    wall, cpu, r = _timed(lambda: sample(
        model, prompts, group_size=GROUP, max_new_tokens=MAX_NEW, temperature=1.0, top_p=1.0,
        eos_token_id=eos, pad_token_id=PAD, generator=g,
    ))
    return wall, cpu, int(r.response_mask.sum())


def _hf_inputs(prompts):
    ids, mask = left_pad(prompts, PAD)
    return ids.repeat_interleave(GROUP, 0), mask.repeat_interleave(GROUP, 0)


def _completion_mask(completion, eos):
    """1 up to and including the first EOS (HF pads after it)."""
    if eos is None:
        return torch.ones_like(completion)
    is_eos = (completion == eos).long()
    return ((is_eos.cumsum(1) - is_eos) == 0).long()


def run_hf(model, prompts, eos, seed, with_logprobs=False):
    ids, mask = _hf_inputs(prompts)
    cfg = GenerationConfig(
        max_new_tokens=MAX_NEW, do_sample=True, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=eos,
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, disable_compile=True,
    )
    torch.manual_seed(seed)

    def go():
        with torch.no_grad():
            completion = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, ids.shape[1]:]
            cmask = _completion_mask(completion, eos)
            if with_logprobs:
                response_logprobs(model, (ids, mask, completion, cmask))
        return int(cmask.sum())

    return _timed(go)


def compare_samplers(model, prompts, eos, repeats):
    runs = {"grpolab_sample": [], "hf_generate": [], "hf_generate_plus_logprob_forward": []}
    run_ours(model, prompts, eos, 123)  # warm-up
    run_hf(model, prompts, eos, 123)
    for i in range(repeats):  # interleaved, so that machine load hits all alike
        runs["grpolab_sample"].append(run_ours(model, prompts, eos, i))
        runs["hf_generate"].append(run_hf(model, prompts, eos, i))
        runs["hf_generate_plus_logprob_forward"].append(run_hf(model, prompts, eos, i, with_logprobs=True))

    def summary(rs):
        rates = [n / wall for wall, _, n in rs]
        return {
            "wall_s_median": statistics.median(w for w, _, _ in rs), "wall_s_min": min(w for w, _, _ in rs),
            "cpu_s_median": statistics.median(c for _, c, _ in rs),
            "tokens_median": statistics.median(n for _, _, n in rs),
            "tokens_per_s_median": statistics.median(rates), "tokens_per_s_best": max(rates),
            "runs": [{"wall_s": w, "cpu_s": c, "tokens": n} for w, c, n in rs],
        }

    out = {k: summary(v) for k, v in runs.items()}
    ours = out["grpolab_sample"]
    for k in ("hf_generate", "hf_generate_plus_logprob_forward"):
        out[f"speedup_vs_{k}"] = {
            "tokens_per_s_median": ours["tokens_per_s_median"] / out[k]["tokens_per_s_median"],
            "tokens_per_s_best": ours["tokens_per_s_best"] / out[k]["tokens_per_s_best"],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads for this benchmark process")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model = build_model()
    prompts = build_prompts()
    n_params = bench.param_count(model)
    results = {
        "setting": {
            "model": "Llama hidden 192, 4 layers, 4 heads, intermediate 512, vocab 48",
            "params": n_params, "prompts": N_PROMPTS, "group_size": GROUP, "max_new_tokens": MAX_NEW,
            "prompt_lengths": [len(p) for p in prompts], "repeats": args.repeats,
            "threads": torch.get_num_threads(),
        },
        "machine": bench.machine(),
        "scenarios": {},
    }
    print(f"model: {n_params / 1e6:.2f}M params; {N_PROMPTS} prompts x {GROUP} samples, {MAX_NEW} new tokens, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats")
    header = (f"{'scenario':<8} {'sampler':<31} {'wall s':>7} {'best s':>7} {'cpu s':>7} {'tokens':>7} "
              f"{'tok/s':>7} {'speedup':>8} {'best-vs-best':>12}")
    print(header)
    print("-" * len(header))
    labels = (("grpolab_sample", "grpolab sample"), ("hf_generate", "HF generate (TRL-style)"),
              ("hf_generate_plus_logprob_forward", "HF generate + logprob forward"))
    for name, eos in (("eos", EOS), ("fixed", None)):
        load_before = bench.load_average()[0]
        res = compare_samplers(model, prompts, eos, args.repeats)
        res["load_average_1min"] = [load_before, bench.load_average()[0]]
        results["scenarios"][name] = res
        for key, label in labels:
            s = res[key]
            sp = res.get(f"speedup_vs_{key}", {"tokens_per_s_median": 1.0, "tokens_per_s_best": 1.0})
            print(f"{name:<8} {label:<31} {s['wall_s_median']:7.3f} {s['wall_s_min']:7.3f} {s['cpu_s_median']:7.3f} "
                  f"{s['tokens_median']:7.0f} {s['tokens_per_s_median']:7.0f} {sp['tokens_per_s_median']:7.2f}x "
                  f"{sp['tokens_per_s_best']:11.2f}x")
    print("speedup = grpolab tokens/s over that sampler's tokens/s (medians); best-vs-best compares the fastest runs")
    loads = [x for sc in results["scenarios"].values() for x in sc["load_average_1min"]]
    if max(loads) > 0.5:
        print(f"note: 1-min load average reached {max(loads):.1f} during the runs (cores: {os.cpu_count()}); "
              "timings on a busy machine are noisy, multi-threaded ones especially (try --threads 1)")
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
