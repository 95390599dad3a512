"""Bit-identity of the policy loss across a restructure: every ratio level x aggregation x dual
clip x KL x advantage shape x precomputed weights, on fixed random inputs.

``snapshot OUT.pt`` records, for each case, the loss, the gradient of the loss with respect to the
log-probs and every metric of :func:`grpolab.objectives.policy_loss`; ``compare A.pt B.pt`` prints
how many cases and values differ (``torch.equal``: bit for bit, NaN-aware) and writes the summary
as JSON. Run ``snapshot`` on the code before and after a change (e.g. with ``PYTHONPATH`` pointing
at an exported copy of the earlier commit), then ``compare``::

    git archive <before> src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src python tools/objective_identity.py snapshot before.pt
    python tools/objective_identity.py snapshot after.pt
    python tools/objective_identity.py compare before.pt after.pt --json identity.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

RATIOS = ("token", "sequence", "gspo", "cumulative")
AGGREGATIONS = ("token", "sequence", "constant", "balanced")


def _inputs(dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    B, T, G = 8, 40, 4
    lengths = torch.tensor([40, 3, 17, 1, 29, 40, 8, 0])
    mask = (torch.arange(T) < lengths[:, None]).long()
    mask[2, 5:9] = 0                                            # a tool-output gap inside a response
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 3
    logp = old + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = old + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv_B = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.8, -1.2, 0.4, 0.0], dtype=torch.float64)
    adv_BT = adv_B[:, None] * (1 + 0.3 * torch.rand(B, T, generator=g, dtype=torch.float64))
    gids = torch.arange(B) // G
    cast = {k: v.to(dtype) for k, v in dict(logp=logp, old=old, ref=ref, adv_B=adv_B, adv_BT=adv_BT).items()}
    return cast, mask, gids, T


def cases():
    for ratio, agg, dual, kl, adv_kind, given_w, dtype in itertools.product(
            RATIOS, AGGREGATIONS, (None, 3.0), ("off", "k1", "k3"), ("B", "BT"), (False, True),
            (torch.float32, torch.float64)):
        name = f"{ratio}/{agg}/dual={dual}/kl={kl}/adv={adv_kind}/weights={given_w}/{str(dtype)[6:]}"
        yield name, dict(ratio=ratio, agg=agg, dual=dual, kl=kl, adv_kind=adv_kind, given_w=given_w, dtype=dtype)


def run_case(c: dict) -> dict[str, torch.Tensor]:
    from grpolab.objectives import aggregation_weights, policy_loss

    t, mask, gids, T = _inputs(c["dtype"])
    logp = t["logp"].clone().requires_grad_(True)
    adv = t["adv_B"] if c["adv_kind"] == "B" else t["adv_BT"]
    clip = (0.025, 0.05) if c["ratio"] == "cumulative" else (0.2, 0.28)
    kw = dict(group_ids=gids, ratio=c["ratio"], aggregation=c["agg"], clip_low=clip[0], clip_high=clip[1],
              dual_clip=c["dual"], clip_power=0.5, max_len=T)
    if c["kl"] != "off":
        kw.update(ref_logp=t["ref"], kl_coef=0.1, kl_estimator=c["kl"])
    if c["given_w"]:
        kw["weights"] = aggregation_weights(mask, c["agg"], advantages=adv, group_ids=gids, max_len=T)
    loss, metrics = policy_loss(logp, t["old"], adv, mask, **kw)
    loss.backward()
    out = {"loss": loss.detach(), "grad": logp.grad.detach()}
    out.update({f"metrics/{k}": v.detach() for k, v in metrics.items()})
    return out


def snapshot(path: str) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one summation order
    try:
        res = {name: run_case(c) for name, c in cases()}
    finally:
        torch.set_num_threads(threads)
    torch.save(res, path)
    print(f"{len(res)} cases, {sum(len(v) for v in res.values())} tensors -> {path}")


def compare(a_path: str, b_path: str, json_path: str | None) -> int:
    a, b = torch.load(a_path), torch.load(b_path)
    rows, n_values, n_diff_values = [], 0, 0
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            rows.append((name, "missing in " + ("first" if name not in a else "second")))
            continue
        keys = sorted(set(a[name]) | set(b[name]))
        for k in keys:
            x, y = a[name].get(k), b[name].get(k)
            n_values += 1 if x is None else x.numel()
            if x is None or y is None or x.shape != y.shape or not torch.equal(torch.nan_to_num(x, 7.0),
                                                                                torch.nan_to_num(y, 7.0)):
                n_diff_values += 1
                rows.append((name, k))
    n_cases = len(set(a) | set(b))
    diff_cases = len({r[0] for r in rows})
    print(f"| cases | tensors | values | cases that differ | tensors that differ |\n|---|---|---|---|---|\n"
          f"| {n_cases} | {sum(len(v) for v in a.values())} | {n_values} | {diff_cases} | {len(rows)} |")
    for r in rows[:20]:
        print("DIFFERENT:", *r)
    if json_path:
        with open(json_path + ".tmp", "w") as f:
            json.dump({"first": a_path, "second": b_path, "cases": n_cases, "values": n_values,
                       "cases_differing": diff_cases, "tensors_differing": [list(r) for r in rows]}, f, indent=1)
        import os

        os.replace(json_path + ".tmp", json_path)
    return 1 if rows else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("snapshot")
    s.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("first")
    c.add_argument("second")
    c.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.cmd == "snapshot":
        snapshot(args.out)
        return 0
    return compare(args.first, args.second, args.json)


if __name__ == "__main__":
    sys.exit(main())
