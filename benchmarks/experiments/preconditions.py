"""Preconditions of the aggregation and ratio studies (issue 16), measured at a warm start.

    python benchmarks/experiments/preconditions.py --warm-start DIR lengths --prompts 128 [--set KEY=V ...]

``lengths``: sign-length coupling, the thing Balanced Aggregation exists to remove. Samples
``prompts x rollout.group_size`` responses from the warm start (the run's sampling settings) and,
within every group that holds both a success (reward >= 1) and a failure, compares the mean length
of the failed responses with that of the successful ones. Reports ``fail_success_length_ratio`` =
(mean over mixed groups of the failures' mean length) / (the same for the successes), the mean of
the per-group ratios, the same ratio pooled over all responses (not within groups: that one mixes
easy and hard prompts), the shares of the mixed groups' failures that are longer / shorter than
their group's mean success, and how many failures were cut at ``rollout.max_new_tokens``. The issue's
precondition is a within-group ratio >= 1.25 over >= 1,000 responses.

Prints one JSON line and writes ``--out`` (default ``runs/bench/preconditions_lengths.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from grpolab import bench


RESULTS = bench.RESULTS_DIR


def length_coupling(lengths: list[float], correct: list[bool], group_size: int) -> dict:
    """Within-group fail/success lengths of rows in groups of ``group_size`` consecutive rows (the last
    group may be shorter): :func:`grpolab.diagnostics.preflight.length_coupling`, the measure
    ``grpolab preflight`` reports, on flat rows."""
    from grpolab.diagnostics.preflight import length_coupling as coupling

    groups = range(0, len(lengths), group_size)
    return coupling([lengths[i:i + group_size] for i in groups], [correct[i:i + group_size] for i in groups],
                    ci=False).to_dict()


def lengths(args) -> None:
    import torch

    from grpolab.config import load_config
    from grpolab.models import load_model
    from grpolab.rollout import sample
    from grpolab.train.setup import build_task_splits
    from grpolab.rollout.prompts import encode_prompts
    from grpolab.rollout.text import decode_responses
    from grpolab.utils.io import atomic_write_json

    cfg = load_config(args.config, overrides=[f"model.path={args.warm_start}", *args.set])
    model, tok = load_model(args.warm_start)
    model.eval()
    train_items, _ = build_task_splits(cfg.task, seed=cfg.trainer.seed)
    items = train_items[: args.prompts]
    G, T = cfg.rollout.group_size, cfg.rollout.max_new_tokens
    gen = torch.Generator().manual_seed(args.seed)
    lens: list[float] = []
    correct: list[bool] = []
    truncated_fail = 0
    for start in range(0, len(items), args.chunk):
        chunk = items[start:start + args.chunk]
        r = sample(model, encode_prompts(tok, [it.prompt for it in chunk]), group_size=G, max_new_tokens=T,
                   temperature=cfg.rollout.temperature, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, generator=gen)
        comp = decode_responses(tok, r.response_ids, r.response_mask)
        n = r.response_mask.sum(-1).tolist()
        for i, c in enumerate(comp):
            ok = chunk[i // G].score(c).score >= 1.0
            lens.append(float(n[i]))
            correct.append(ok)
            truncated_fail += (not ok) and n[i] >= T
    row = {**length_coupling(lens, correct, G), "truncated_fail_frac": truncated_fail / max(correct.count(False), 1),
           "max_new_tokens": T, "group_size": G, "prompts": len(items), "task": cfg.task.name,
           "task_options": cfg.task.options, "warm_start": str(args.warm_start), "seed": args.seed, "extra": args.set}
    print(json.dumps(row), flush=True)
    out = Path(args.out or RESULTS / "preconditions_lengths.json")
    atomic_write_json(out, row)
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", required=True, help="warm-started model directory (HF format)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("lengths")
    s.add_argument("--prompts", type=int, default=128)
    s.add_argument("--chunk", type=int, default=32, help="prompts per sampling call")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--config", default=None)
    s.add_argument("--set", action="append", default=[])
    s.add_argument("--out", default=None)
    args = ap.parse_args()
    {"lengths": lengths}[args.cmd](args)


if __name__ == "__main__":
    main()
