"""GPU check: the chat-template path on a Qwen2.5-0.5B-shaped model (random weights, bf16).

Four runs of ``--steps`` steps each (default 5): GRPO and RLSD, each with full fine-tuning and
with LoRA. One step is what grpolab's trainer does: chat-template prompts
(:class:`grpolab.tasks.PromptFormat`) -> sampling with a KV cache (stopping on every
``generation_config`` EOS id) -> a reward -> group advantages -> for RLSD the privileged teacher
forward (prompt built at the message level, a frozen copy of the policy, or with LoRA the base
model with its adapters disabled) and the RLSD token weights -> forward + backward + AdamW over
micro-batches. Weights are random, so the reward is a function of the token ids (the fraction of
ids divisible by 3): it only has to vary inside a group.

Printed per run: rollout tokens/s (generated tokens), update tokens/s (prompt + response tokens
through forward + backward), teacher tokens/s (RLSD), peak memory, and MFU against the GPU's dense
bf16 peak (``--peak-tflops`` overrides the built-in table). FLOPs: ``2 N`` per token for a
forward, ``6 N`` for forward + backward with full fine-tuning, ``4 N`` with LoRA (no base-weight
gradients), ``N`` the parameter count with the tied embedding counted once (it is the LM head);
attention FLOPs are left out, so MFU is slightly understated.

Then the rollout against Hugging Face ``generate`` (``benchmarks/speed/real_model_speed.py``'s
measurement: the same prompts, group size and sampling, exactly ``--max-new-tokens`` tokens per row
with EOS off, KV cache on, rounds interleaved) and its share of the FLOP floor at the GPU's bf16
peak: ``rollout_vs_hf`` in the JSON. ``--model DIR`` runs everything on a real local model (e.g.
the SmolLM2 directory ``grpolab models import smollm2-135m-instruct`` writes) instead of the
random Qwen-shaped one. The CPU-only parts of ``real_model_speed.py`` (the TRL step ratio and the
peak RSS fresh and after ``--resume``) run on a GPU machine as they are
(``python benchmarks/speed/real_model_speed.py --model DIR``).

    python benchmarks/speed/gpu_check.py                 # on a GPU: about 2-4 minutes on an H100
    python benchmarks/speed/gpu_check.py --model DIR     # a real model (bf16 on the GPU)
    python benchmarks/speed/gpu_check.py --dry-run       # the same code on CPU at a tiny width (CI)

Writes runs/bench/gpu_check.json (``--out``).
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import resource
import sys
import time
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch

from grpolab import bench

#: Dense bf16 tensor-core peaks (FLOP/s), by a substring of ``torch.cuda.get_device_name()``.
BF16_PEAK = [
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("GH200", 989e12), ("B200", 2250e12),
    ("A100", 312e12), ("A800", 312e12), ("L40S", 362e12), ("L40", 181e12), ("A6000", 155e12),
    ("A10G", 70e12), ("A10", 125e12), ("L4", 121e12), ("4090", 165e12), ("3090", 71e12), ("V100", 125e12),
]

QWEN25_05B = dict(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab_size=151936)
TINY = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab_size=None)

QUESTIONS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
    "How much did she earn?",
]


def peak_flops(device: torch.device, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, peak in BF16_PEAK:
        if key in name:
            return peak
    return None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (Linux: KiB)


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)



def build_model(args, device, dtype, shape):
    """``(model, tokenizer)``: the real model of ``--model``, else the random chat model of ``shape``."""
    if args.model:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
        return model, tok
    from grpolab.models.testing import build_chat_model, build_chat_tokenizer

    tok = build_chat_tokenizer()
    model = build_chat_model(tok, hidden=shape["hidden"], layers=shape["layers"], heads=shape["heads"],
                             kv_heads=shape["kv_heads"], intermediate=shape["intermediate"],
                             vocab_size=shape["vocab_size"], seed=0).to(device=device, dtype=dtype)
    return model, tok


def rollout_vs_hf(args, device, dtype, shape) -> dict:
    """grpolab's sampler against HF ``generate`` (interleaved rounds), and the FLOP floor at the peak."""
    import statistics

    from grpolab.bench.timing import time_hf_generate, time_sample, timing_prompts

    model, tok = build_model(args, device, dtype, shape)
    if args.attn:
        model.config._attn_implementation = args.attn
    prompts = timing_prompts(tok, args.prompts)
    G, T, pad = args.group_size, args.max_new_tokens, tok.pad_token_id
    time_sample(model, prompts, G, min(T, 4), pad, 0)  # warm-up
    time_hf_generate(model, prompts, G, min(T, 4), pad, 0)
    times = bench.interleaved({"grpolab": lambda r: time_sample(model, prompts, G, T, pad, r),
                               "hf_generate": lambda r: time_hf_generate(model, prompts, G, T, pad, r)}, args.rounds)
    B = len(prompts) * G
    g = B * T / statistics.median(times["grpolab"])
    h = B * T / statistics.median(times["hf_generate"])
    flops = 2 * bench.param_count(model)
    peak = peak_flops(device, args.peak_tflops)
    del model
    return {"rows": B, "max_new_tokens": T, "seconds": times, "grpolab_tok_s": g, "hf_generate_tok_s": h,
            "grpolab_over_hf": g / h, "flop_floor_tok_s": peak / flops if peak else None,
            "grpolab_share_of_floor": g * flops / peak if peak else None}


def run_one(method: str, lora: bool, args, device, dtype, shape) -> dict:
    from grpolab import objectives as obj
    from grpolab.models import stop_token_ids
    from grpolab.models.lora import AdaptersOff, apply_lora, parameter_counts
    from grpolab.rollout import left_pad, response_logprobs, sample, teacher_logprobs
    from grpolab.teacher_text import teacher_messages
    from grpolab.tasks import PromptFormat, TaskItem

    model, tok = build_model(args, device, dtype, shape)
    if args.attn:
        model.config._attn_implementation = args.attn
    N = bench.param_count(model)
    if lora:
        apply_lora(model, {"r": args.lora_r, "alpha": 2 * args.lora_r})
    trainable, total = parameter_counts(model)
    teacher = None
    if method == "rlsd":
        teacher = AdaptersOff(model) if lora else copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    fmt = PromptFormat(chat_template="on", system_prompt="You are a helpful assistant.")
    items = [TaskItem(prompt=QUESTIONS[i % len(QUESTIONS)] + f" (case {i})", reference="72",
                      privileged="48/2 = 24 clips in May. 48 + 24 = 72. #### 72") for i in range(args.prompts)]
    prompts = fmt.encode(items, tok)
    t_prompts = [fmt.encode_messages(teacher_messages(fmt.messages(it), it), tok) for it in items]
    stops = stop_token_ids(model, tok)
    G = args.group_size
    gen = torch.Generator(device="cpu").manual_seed(0)
    adv_fn = obj.get_advantage_estimator("grpo")
    t = {"rollout": 0.0, "teacher": 0.0, "update": 0.0}
    tokens = {"generated": 0, "update": 0, "teacher": 0}
    reset_peak(device)
    for step in range(args.steps + 1):  # step 0 warms up (kernels, allocator) and is not timed
        timed = step > 0
        model.eval()
        sync(device)
        t0 = time.perf_counter()
        with torch.no_grad():
            r = sample(model, prompts, group_size=G, max_new_tokens=args.max_new_tokens, temperature=1.0,
                       eos_token_id=stops, pad_token_id=tok.pad_token_id, generator=gen)
        sync(device)
        t1 = time.perf_counter()
        ids, mask = r.response_ids, r.response_mask
        rewards = ((ids % 3 == 0) & mask.bool()).sum(-1).float() / mask.sum(-1).clamp_min(1)
        adv = adv_fn(rewards.cpu(), r.group_ids.cpu()).to(device)
        if method == "rlsd":
            t_ids, t_mask = left_pad(t_prompts, tok.pad_token_id, device=device)
            res = teacher_logprobs(teacher, t_ids, t_mask, r, prompt_index=r.group_ids.to(device),
                                   micro_batch_size=args.micro_batch)
            adv = obj.credit_advantages("rlsd", adv, r.sample_logp.float(), res.logp, mask.float(),
                                        lam=0.5, eps_w=0.2).advantages
        sync(device)
        t2 = time.perf_counter()
        model.train()
        opt.zero_grad(set_to_none=True)
        B = r.batch_size
        W = obj.aggregation_weights(mask.float(), "token")
        for s in range(0, B, args.micro_batch):
            rows = torch.arange(s, min(s + args.micro_batch, B), device=device)
            part = r.select(rows)
            lp = response_logprobs(model, part).logp
            loss, _ = obj.policy_loss(lp, lp.detach(), adv[rows], part.response_mask, weights=W[rows])
            loss.backward()
        opt.step()
        sync(device)
        t3 = time.perf_counter()
        if timed:
            t["rollout"] += t1 - t0
            t["teacher"] += t2 - t1
            t["update"] += t3 - t2
            gen_tokens = int(mask.sum())
            seq_tokens = gen_tokens + int(r.prompt_mask.sum())
            tokens["generated"] += gen_tokens
            tokens["update"] += seq_tokens
            tokens["teacher"] += (int(mask.sum()) + int(t_mask.sum())) if method == "rlsd" else 0
    peak = peak_flops(device, args.peak_tflops)
    upd_flops = (4 if lora else 6) * N * tokens["update"]
    fwd_flops = 2 * N * (tokens["generated"] + tokens["teacher"])
    total_s = t["rollout"] + t["teacher"] + t["update"]
    row = {
        "method": method, "lora": lora, "params": N, "trainable": trainable, "trainable_frac": trainable / total,
        "steps": args.steps, "rows_per_step": args.prompts * G,
        "rollout_tok_s": tokens["generated"] / max(t["rollout"], 1e-9),
        "update_tok_s": tokens["update"] / max(t["update"], 1e-9),
        "teacher_tok_s": tokens["teacher"] / t["teacher"] if method == "rlsd" and t["teacher"] > 0 else None,
        "s_per_step": total_s / args.steps,
        "peak_mem_mib": peak_memory_mib(device),
        "mfu_update": upd_flops / t["update"] / peak if peak else None,
        "mfu_step": (upd_flops + fwd_flops) / total_s / peak if peak else None,
        "mean_response_len": tokens["generated"] / (args.steps * args.prompts * G),
    }
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            raise RuntimeError(f"{method} lora={lora}: {k} is {v}")
    del model, teacher, opt
    return row


def fmt_row(row: dict) -> str:
    def f(v, spec):
        return "n/a" if v is None else format(v, spec)

    return (f"| {row['method']:5s} | {'yes' if row['lora'] else 'no ':3s} | {row['trainable_frac'] * 100:6.2f}% | "
            f"{f(row['rollout_tok_s'], '9.0f')} | {f(row['update_tok_s'], '9.0f')} | {f(row['teacher_tok_s'], '9.0f')} | "
            f"{row['s_per_step']:7.2f} | {row['peak_mem_mib']:9.0f} | {f(row['mfu_update'] and row['mfu_update'] * 100, '5.1f')} | "
            f"{f(row['mfu_step'] and row['mfu_step'] * 100, '5.1f')} |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny width, float32: checks the code path")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=16, help="prompts per step")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=32, help="rows per forward/backward")
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--attn", default="sdpa", help="attention implementation ('' = default)")
    ap.add_argument("--model", type=Path, default=None, help="a local HF model directory (default: random Qwen-shaped)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the rollout-vs-generate timing")
    ap.add_argument("--peak-tflops", type=float, default=None, help="override the bf16 peak (TFLOP/s)")
    ap.add_argument("--out", default=str(bench.results_path("gpu_check.json")))
    args = ap.parse_args(argv)
    if args.dry_run:
        device, dtype, shape = torch.device("cpu"), torch.float32, TINY
        args.prompts, args.group_size = min(args.prompts, 2), min(args.group_size, 4)
        args.max_new_tokens, args.micro_batch = min(args.max_new_tokens, 8), min(args.micro_batch, 4)
        args.lora_r = min(args.lora_r, 4)
        args.rounds = min(args.rounds, 1)
    else:
        if not torch.cuda.is_available():
            print("error: no CUDA device; use --dry-run to check the code path on CPU", file=sys.stderr)
            return 2
        device, dtype, shape = torch.device("cuda"), torch.bfloat16, QWEN25_05B
    t0 = time.time()
    rows = [run_one(m, lora, args, device, dtype, shape) for m in ("grpo", "rlsd") for lora in (False, True)]
    vs_hf = rollout_vs_hf(args, device, dtype, shape)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    print(f"device: {name}; model: {args.model or f'Qwen2-shaped {shape}'} ({rows[0]['params'] / 1e6:.1f} M params), {dtype}; "
          f"{args.prompts} prompts x {args.group_size} samples, <= {args.max_new_tokens} new tokens, "
          f"{args.steps} timed steps per run")
    print("| run   | LoRA | trainable | rollout tok/s | update tok/s | teacher tok/s | s/step | peak MiB | MFU update % | MFU step % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(fmt_row(row))
    print(f"rollout: grpolab {vs_hf['grpolab_tok_s']:.0f} tok/s, HF generate {vs_hf['hf_generate_tok_s']:.0f} tok/s "
          f"({vs_hf['grpolab_over_hf']:.2f}x)" + (f", {100 * vs_hf['grpolab_share_of_floor']:.1f}% of the FLOP floor"
                                                  if vs_hf["grpolab_share_of_floor"] else ""))
    print(f"total {time.time() - t0:.0f} s")
    out = Path(args.out)
    if not args.dry_run or os.environ.get("GPU_CHECK_WRITE_DRY_RUN"):
        from grpolab.utils.io import atomic_write_json

        atomic_write_json(out, {"device": name, "shape": shape, "dtype": str(dtype), "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                                "model": str(args.model) if args.model else "random Qwen2-shaped",
                                "rows": rows, "rollout_vs_hf": vs_hf})
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
