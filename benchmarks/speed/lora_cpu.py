"""LoRA and gradient checkpointing on CPU: memory and update-step time on a small Qwen2-shaped model.

Four settings -- full fine-tuning or LoRA (r=16 on every projection), each with and without
gradient checkpointing -- each measured in its own process (so a process's peak RSS is that
setting's): ``--steps`` update steps (forward + backward over ``[prompt; response]`` rows with
grpolab's loss, then AdamW), after one warm-up step. Reported: trainable parameters, the bytes of
AdamW state and gradients actually held, the process's peak RSS, and the median step time.
Settings run in interleaved rounds so a noisy (shared) machine affects all alike.

    python benchmarks/speed/lora_cpu.py                       # writes runs/bench/lora_cpu.json
    python benchmarks/speed/lora_cpu.py --hidden 256 --layers 4 --steps 2   # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from grpolab import bench

SETTINGS = [("full", False), ("full", True), ("lora", False), ("lora", True)]


def one(args) -> dict:
    import torch

    from grpolab import objectives as obj
    from grpolab.models import enable_gradient_checkpointing
    from grpolab.models.lora import apply_lora, parameter_counts
    from grpolab.models.testing import build_chat_model, build_chat_tokenizer
    from grpolab.rollout import response_logprobs

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    tok = build_chat_tokenizer()
    model = build_chat_model(tok, hidden=args.hidden, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                             intermediate=args.intermediate, vocab_size=args.vocab)
    if args.mode == "lora":
        apply_lora(model, {"r": args.r, "alpha": 2 * args.r})
    if args.ckpt:
        enable_gradient_checkpointing(model)
    trainable, total = parameter_counts(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    g = torch.Generator().manual_seed(0)
    B, P, T = args.rows, args.prompt_len, args.response_len
    batch = (torch.randint(3, args.vocab, (B, P), generator=g), torch.ones(B, P, dtype=torch.long),
             torch.randint(3, args.vocab, (B, T), generator=g), torch.ones(B, T, dtype=torch.long))
    adv = torch.randn(B, generator=g)
    W = obj.aggregation_weights(batch[3].float(), "token")
    times = []
    model.train()
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for s in range(0, B, args.micro_batch):
            sl = slice(s, s + args.micro_batch)
            part = tuple(x[sl] for x in batch)
            lp = response_logprobs(model, part).logp
            loss, _ = obj.policy_loss(lp, lp.detach(), adv[sl], part[3], weights=W[sl])
            loss.backward()
        opt.step()
        if step > 0:
            times.append(time.perf_counter() - t0)
    state_bytes = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                      if torch.is_tensor(t) and t.dim() > 0)
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    return {"mode": args.mode, "ckpt": args.ckpt, "params": total, "trainable": trainable,
            "trainable_frac": trainable / total, "adam_state_mib": state_bytes / 2**20, "grad_mib": grad_bytes / 2**20,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "step_s": times}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--r", type=int, default=16)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--response-len", type=int, default=192)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--out", default=str(bench.results_path("lora_cpu.json")))
    ap.add_argument("--mode", choices=["full", "lora"], help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(one(args)))
        return 0
    raw = list(argv if argv is not None else sys.argv[1:])
    base = []
    while raw:  # the children get the same model/batch options, without --out
        a = raw.pop(0)
        if a == "--out":
            raw.pop(0)
        elif not a.startswith("--out="):
            base.append(a)
    results: dict[tuple, list] = {s: [] for s in SETTINGS}
    for _ in range(args.rounds):
        for mode, ckpt in SETTINGS:
            cmd = [sys.executable, __file__, *base, "--child", "--mode", mode] + (["--ckpt"] if ckpt else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[(mode, ckpt)].append(json.loads(out.strip().splitlines()[-1]))
    rows = []
    for (mode, ckpt), runs in results.items():
        r = dict(runs[0])
        r["step_s"] = statistics.median(t for run in runs for t in run["step_s"])
        r["peak_rss_mib"] = max(run["peak_rss_mib"] for run in runs)
        rows.append(r)
    full = rows[0]
    print(f"Qwen2-shaped model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab} "
          f"({full['params'] / 1e6:.1f} M params); {args.rows} rows x ({args.prompt_len} + {args.response_len}) "
          f"tokens per step, micro-batch {args.micro_batch}, {args.threads} thread(s)")
    print("| setting | trainable | AdamW state MiB | grads MiB | peak RSS MiB | step s | step / full |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        name = f"{r['mode']}{' + ckpt' if r['ckpt'] else ''}"
        print(f"| {name} | {r['trainable'] / 1e6:.2f} M ({r['trainable_frac'] * 100:.2f}%) | {r['adam_state_mib']:.1f} | "
              f"{r['grad_mib']:.1f} | {r['peak_rss_mib']:.0f} | {r['step_s']:.2f} | {r['step_s'] / full['step_s']:.2f} |")
    from grpolab.utils.io import atomic_write_json

    atomic_write_json(args.out, {"args": {k: v for k, v in vars(args).items() if k not in ("mode", "ckpt", "child")},
                                 "rows": rows})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
