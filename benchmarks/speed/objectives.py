"""Speed of grpolab.objectives.policy_loss (forward + backward) for every ratio x aggregation.

    python benchmarks/speed/objectives.py [--repeats 5] [--B 256] [--T 2048]

Full size: float32, random ragged mask (lengths uniform in [T/8, T], ~10% tool-output gaps),
prompt groups of 8, median of ``--repeats`` timed rounds after one warm-up round (rounds
interleave the combinations so background load affects them alike). For scale, the slow
float64 loop reference of tests/objectives/reference.py (value + analytic gradient) and the
implementation are also timed on a small batch (``--small-B`` x ``--small-T``).

Target: every combination within 3x of token/token at full size. Writes
runs/bench/objectives.json (atomically: temp file + os.replace).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from grpolab.objectives import policy_loss
from grpolab import bench
from grpolab.utils.io import atomic_write_json

HERE = Path(__file__).resolve().parent


def _reference_module():
    """The slow loop twins (tests/objectives/reference.py), loaded from their file: test code, not
    part of the installed package."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("grpolab_loss_reference",
                                                  HERE.parents[1] / "tests" / "objectives" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


ref_policy_loss = _reference_module().ref_policy_loss

RATIOS = ("token", "sequence", "gspo", "cumulative")
AGGREGATIONS = ("token", "sequence", "constant", "balanced")
TARGET_X = 3.0
CTPO = dict(clip_low=0.025, clip_high=0.05, clip_power=0.5)


def make_inputs(B: int, T: int, dtype: torch.dtype, seed: int = 0, group_size: int = 8) -> dict:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(max(T // 8, 1), T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lens[:, None]) & (torch.rand(B, T, generator=g) > 0.1)
    mask[:, 0] = True
    logp = -3.0 * torch.rand(B, T, generator=g)
    old = logp - 0.1 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    gid = torch.arange(B) // group_size
    return dict(logp=logp.to(dtype), old=old.to(dtype), adv=adv.to(dtype), mask=mask.to(dtype), gid=gid,
                max_len=T)


def kwargs_for(ratio: str, aggregation: str, x: dict) -> dict:
    kw = dict(group_ids=x["gid"], ratio=ratio, aggregation=aggregation, max_len=x["max_len"])
    if ratio == "cumulative":
        kw.update(CTPO)
    return kw


def run_once(x: dict, ratio: str, aggregation: str) -> float:
    """Seconds for one forward + backward of policy_loss."""
    kw = kwargs_for(ratio, aggregation, x)
    lp = x["logp"].clone().requires_grad_(True)
    t0 = time.perf_counter()
    loss, _ = policy_loss(lp, x["old"], x["adv"], x["mask"], **kw)
    loss.backward()
    return time.perf_counter() - t0


def time_all(x: dict, combos: list, repeats: int) -> dict:
    """Median seconds per combination. Rounds are interleaved (every combination once per
    round, after one warm-up round) so that background load hits all combinations alike."""
    times = {c: [] for c in combos}
    for k in range(repeats + 1):
        for c in combos:
            dt = run_once(x, *c)
            if k > 0:
                times[c].append(dt)
    return {c: (statistics.median(v), min(v)) for c, v in times.items()}


def time_ref(x: dict, ratio: str, aggregation: str, repeats: int) -> float:
    kw = kwargs_for(ratio, aggregation, x)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ref_policy_loss(x["logp"], x["old"], x["adv"], x["mask"], **kw)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--B", type=int, default=256)
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--small-B", type=int, default=8)
    ap.add_argument("--small-T", type=int, default=64)
    ap.add_argument("--out", type=Path, default=bench.results_path("objectives.json"))
    args = ap.parse_args(argv)

    big = make_inputs(args.B, args.T, torch.float32)
    small32 = make_inputs(args.small_B, args.small_T, torch.float32, seed=1)
    small64 = {k: (v.double() if torch.is_tensor(v) and v.is_floating_point() else v)
               for k, v in small32.items()}
    n_tok = int(big["mask"].sum())
    print(f"policy_loss forward+backward, float32, B={args.B} T={args.T} ({n_tok} policy tokens), "
          f"groups of 8, median of {args.repeats}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(f"small batch B={args.small_B} T={args.small_T}: implementation (float32) vs loop reference (float64)")

    combos = [(ratio, agg) for ratio in RATIOS for agg in AGGREGATIONS]
    full = time_all(big, combos, args.repeats)
    small = time_all(small32, combos, args.repeats)
    rows = []
    for ratio, agg in combos:
        rows.append(dict(ratio=ratio, aggregation=agg, impl_ms=1e3 * full[(ratio, agg)][0],
                         impl_min_ms=1e3 * full[(ratio, agg)][1],
                         small_impl_ms=1e3 * small[(ratio, agg)][0],
                         small_ref_ms=1e3 * time_ref(small64, ratio, agg, max(1, min(args.repeats, 3)))))
    base = next(r["impl_ms"] for r in rows if r["ratio"] == "token" and r["aggregation"] == "token")
    base_min = next(r["impl_min_ms"] for r in rows if r["ratio"] == "token" and r["aggregation"] == "token")
    for r in rows:
        r["x_token_token"] = r["impl_ms"] / base
        r["x_token_token_min"] = r["impl_min_ms"] / base_min
        r["within_target"] = r["x_token_token"] <= TARGET_X
        r["ref_over_impl_small"] = r["small_ref_ms"] / r["small_impl_ms"]

    hdr = (f"{'ratio':<11}{'aggregation':<12}{'ms (full)':>11}{'x tok/tok':>11}{'<=3x':>6}"
           f"{'min ms':>9}{'x (min)':>9}"
           f"{'impl ms (small)':>17}{'ref ms (small)':>16}{'ref/impl':>10}")
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        print(f"{r['ratio']:<11}{r['aggregation']:<12}{r['impl_ms']:>11.2f}{r['x_token_token']:>11.2f}"
              f"{'yes' if r['within_target'] else 'NO':>6}{r['impl_min_ms']:>9.2f}{r['x_token_token_min']:>9.2f}"
              f"{r['small_impl_ms']:>17.3f}"
              f"{r['small_ref_ms']:>16.2f}{r['ref_over_impl_small']:>10.0f}")
    ok = all(r["within_target"] for r in rows)
    worst = max(rows, key=lambda r: r["x_token_token"])
    print(f"target: every combination within {TARGET_X:g}x of token/token -> "
          f"{'MET' if ok else 'NOT MET'} (worst {worst['ratio']}/{worst['aggregation']} "
          f"{worst['x_token_token']:.2f}x)")

    payload = dict(
        benchmark="objectives.policy_loss forward+backward",
        config=dict(B=args.B, T=args.T, dtype="float32", group_size=8, repeats=args.repeats,
                    policy_tokens=n_tok, small_B=args.small_B, small_T=args.small_T,
                    machine=bench.machine()),
        target=f"every combination within {TARGET_X:g}x of token/token",
        target_met=ok,
        results=rows,
    )
    atomic_write_json(args.out, payload)
    print("(ms = median; min ms / x (min) = fastest run, less sensitive to other load on the machine)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
