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

Run:  python benchmarks/rollout.py [--repeats 5] [--threads N]
Writes benchmarks/results/rollout.json (atomically).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from grpolab.rollout import left_pad, response_logprobs, sample

VOCAB, PAD, BOS, EOS = 48, 0, 1, 2
N_PROMPTS, GROUP, MAX_NEW = 32, 8, 48
RESULTS = Path(__file__).resolve().parent / "results" / "rollout.json"


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


def run_ours(model, prompts, eos, seed):
    g = torch.Generator().manual_seed(seed)
    t0 = time.perf_counter()
    r = sample(model, prompts, group_size=GROUP, max_new_tokens=MAX_NEW, temperature=1.0, top_p=1.0,
               eos_token_id=eos, pad_token_id=PAD, generator=g)
    dt = time.perf_counter() - t0
    return dt, int(r.response_mask.sum())


def _hf_inputs(prompts):
    ids, mask = left_pad(prompts, PAD)
    return ids.repeat_interleave(GROUP, 0), mask.repeat_interleave(GROUP, 0)


def _count_hf_tokens(completion, eos):
    if eos is None:
        return completion.numel()
    is_eos = completion == eos
    # tokens up to and including the first EOS (HF pads after it)
    first = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], completion.shape[1], dtype=torch.long))
    return int(first.sum())


def run_hf(model, prompts, eos, seed, with_logprobs=False):
    ids, mask = _hf_inputs(prompts)
    cfg = GenerationConfig(
        max_new_tokens=MAX_NEW, do_sample=True, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=eos,
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, disable_compile=True,
    )
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        completion = out[:, ids.shape[1]:]
        if with_logprobs:
            if eos is None:
                cmask = torch.ones_like(completion)
            else:
                is_eos = completion == eos
                cmask = (is_eos.cumsum(1) - is_eos.long()) == 0
            response_logprobs(model, (ids, mask, completion, cmask.long()))
    dt = time.perf_counter() - t0
    return dt, _count_hf_tokens(completion, eos)


def bench(model, prompts, eos, repeats):
    ours, hf, hf_lp = [], [], []
    run_ours(model, prompts, eos, 123)  # warm-up
    run_hf(model, prompts, eos, 123)
    for i in range(repeats):
        ours.append(run_ours(model, prompts, eos, i))
        hf.append(run_hf(model, prompts, eos, i))
        hf_lp.append(run_hf(model, prompts, eos, i, with_logprobs=True))

    def summary(runs):
        secs = statistics.median(dt for dt, _ in runs)
        toks = statistics.median(n for _, n in runs)
        rates = [n / dt for dt, n in runs]
        return {"seconds": secs, "tokens": toks, "tokens_per_s": statistics.median(rates)}

    s_ours, s_hf, s_hf_lp = summary(ours), summary(hf), summary(hf_lp)
    return {
        "grpolab_sample": s_ours,
        "hf_generate": s_hf,
        "hf_generate_plus_logprob_forward": s_hf_lp,
        "speedup_tokens_per_s": s_ours["tokens_per_s"] / s_hf["tokens_per_s"],
        "speedup_vs_generate_plus_logprobs": s_ours["tokens_per_s"] / s_hf_lp["tokens_per_s"],
    }


def atomic_write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    n_params = sum(p.numel() for p in model.parameters())
    results = {
        "setting": {
            "model": "Llama hidden 192, 4 layers, 4 heads, intermediate 512, vocab 48",
            "params": n_params, "prompts": N_PROMPTS, "group_size": GROUP, "max_new_tokens": MAX_NEW,
            "prompt_lengths": [len(p) for p in prompts], "repeats": args.repeats,
            "torch": torch.__version__, "threads": torch.get_num_threads(),
            "transformers": __import__("transformers").__version__, "machine": platform.processor() or platform.machine(),
        },
        "scenarios": {},
    }
    print(f"model: {n_params / 1e6:.2f}M params; {N_PROMPTS} prompts x {GROUP} samples, {MAX_NEW} new tokens, "
          f"{torch.get_num_threads()} threads")
    header = f"{'scenario':<8} {'sampler':<34} {'seconds':>8} {'tokens':>7} {'tok/s':>8} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    for name, eos in (("eos", EOS), ("fixed", None)):
        res = bench(model, prompts, eos, args.repeats)
        results["scenarios"][name] = res
        for key, label in (("grpolab_sample", "grpolab sample"), ("hf_generate", "HF generate (TRL-style)"),
                           ("hf_generate_plus_logprob_forward", "HF generate + logprob forward")):
            s = res[key]
            ratio = res["grpolab_sample"]["tokens_per_s"] / s["tokens_per_s"]
            print(f"{name:<8} {label:<34} {s['seconds']:8.3f} {s['tokens']:7.0f} {s['tokens_per_s']:8.0f} {ratio:6.2f}x")
    atomic_write_json(args.out, results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
