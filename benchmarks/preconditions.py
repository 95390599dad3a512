"""Preconditions of the aggregation and ratio studies (issue 16), measured at a warm start.

    python benchmarks/preconditions.py --warm-start DIR lengths --prompts 128 [--set KEY=V ...]

``lengths``: sign-length coupling, the thing Balanced Aggregation exists to remove. Samples
``prompts x rollout.group_size`` responses from the warm start (the run's sampling settings) and,
within every group that holds both a success (reward >= 1) and a failure, compares the mean length
of the failed responses with that of the successful ones. Reports ``fail_success_length_ratio`` =
(mean over mixed groups of the failures' mean length) / (the same for the successes), the mean of
the per-group ratios, the same ratio pooled over all responses (not within groups: that one mixes
easy and hard prompts), the shares of the mixed groups' failures that are longer / shorter than
their group's mean success, and how many failures were cut at ``rollout.max_new_tokens``. The issue's
precondition is a within-group ratio >= 1.25 over >= 1,000 responses.

Prints one JSON line and writes ``--out`` (default ``benchmarks/results/preconditions_lengths.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


RESULTS = Path(__file__).parent / "results"


def length_coupling(lengths: list[float], correct: list[bool], group_size: int) -> dict:
    """Within-group fail/success lengths of rows in groups of ``group_size`` consecutive rows.

    The within-group ratio and means are the training metric ``length/mixed_*``
    (:func:`grpolab.train.step_metrics.within_group_lengths`), in float64; this adds the per-group ratio, the
    shares of longer / shorter failures and the pooled ratio. A field with no group to average is None."""
    import torch

    from grpolab.train.step_metrics import group_lengths, within_group_lengths

    len_B = torch.tensor(lengths, dtype=torch.float64)
    ok_B = torch.tensor(correct, dtype=torch.bool)
    group_B = torch.arange(len(lengths)) // group_size
    n_groups = -(-len(lengths) // group_size)
    core = within_group_lengths(len_B, ok_B, group_B, n_groups)
    core = {k: (None if math.isnan(v) else v) for k, v in core.items()}
    g = group_lengths(len_B, ok_B, group_B, n_groups)
    mixed = g.mixed_G
    ratios = (g.incorrect_G[mixed] / g.correct_G[mixed].clamp_min(1e-9)).tolist()
    fail_mixed_B = ~ok_B & mixed[group_B]  # failures of mixed groups, against their group's mean success
    n_fail_mixed = int(fail_mixed_B.sum())
    longer = int((fail_mixed_B & (len_B > g.correct_G[group_B])).sum())
    shorter = int((fail_mixed_B & (len_B < g.correct_G[group_B])).sum())
    mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
    fail_all = [x for x, c in zip(lengths, correct) if not c]
    succ_all = [x for x, c in zip(lengths, correct) if c]
    return {
        "responses": len(lengths), "correct_frac": sum(correct) / max(len(correct), 1),
        "mixed_groups": int(mixed.sum()),
        "fail_success_length_ratio": core["length/mixed_ratio"],
        "mean_group_ratio": mean(ratios),
        "mean_fail_tokens_mixed": core["length/mixed_incorrect"],
        "mean_success_tokens_mixed": core["length/mixed_correct"],
        "pooled_fail_success_ratio": (mean(fail_all) / mean(succ_all)) if fail_all and succ_all else None,
        "mean_response_tokens": mean(lengths),
        # which failures dominate: longer / shorter than their group's mean success length
        "fail_longer_frac": longer / n_fail_mixed if n_fail_mixed else None,
        "fail_shorter_frac": shorter / n_fail_mixed if n_fail_mixed else None,
    }


def lengths(args) -> None:
    import torch

    from grpolab.config import load_config
    from grpolab.models import load_model
    from grpolab.rollout import sample
    from grpolab.train.setup import build_task_splits
    from grpolab.train.text import decode_responses, encode_prompts
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
