"""Print the diagnose tables of docs/when-grpo-helps.md from finished runs' diagnose.json files.

    python studies/when_grpo_helps_tables.py runs/sweep_lr/runs/lr=1e-4,seed=0 runs/sweep_lr/runs/lr=1e-3,seed=0 ...
"""

import json
import sys
from pathlib import Path


def main(run_dirs: list[str]) -> None:
    res = {Path(d).name: json.loads((Path(d) / "diagnose.json").read_text()) for d in run_dirs}
    f = lambda e, s="": f"{e['value']:{s}.3f} [{e['low']:{s}.3f}, {e['high']:{s}.3f}]"  # noqa: E731
    print("| run | base | trained | " + " | ".join(
        f"revert {g}" for g in next(iter(res.values()))["causal"]["groups"]) + " |")
    print("|---|---|---|" + "---|" * len(next(iter(res.values()))["causal"]["groups"]))
    for name, r in res.items():
        c = r["causal"]
        print(f"| {name} | {c['base']['value']:.3f} | {f(c['trained'])} | " + " | ".join(
            f(e["revert"]) for e in c["groups"].values()) + " |")
    print()
    print("| run | " + " | ".join(f"transplant {g}" for g in next(iter(res.values()))["causal"]["groups"]) + " |")
    print("|---|" + "---|" * len(next(iter(res.values()))["causal"]["groups"]))
    for name, r in res.items():
        print(f"| {name} | " + " | ".join(f(e["transplant"]) for e in r["causal"]["groups"].values()) + " |")
    print()
    kinds = ["embed", "attention", "mlp", "norm", "head"]
    print("| run | " + " | ".join(f"{k} rel. change (share)" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name, r in res.items():
        d = {x["group"]: x for x in r["drift"]}
        print(f"| {name} | " + " | ".join(f"{d[k]['relative']:.3f} ({d[k]['share']:.1%})" for k in kinds if k in d) + " |")
    print()
    n = len(next(iter(res.values()))["hidden_ranks"]["base"])
    print("| run | " + " | ".join(f"h{i} base -> trained" for i in range(n)) + " |")
    print("|---|" + "---|" * n)
    for name, r in res.items():
        h = r["hidden_ranks"]
        print(f"| {name} | " + " | ".join(f"{a:.1f} -> {b:.1f}" for a, b in zip(h["base"], h["trained"])) + " |")
    print()
    print("| run | mean erank of update, attention | mean erank of update, mlp | mean erank trained/base, attention | mlp |")
    print("|---|---|---|---|---|")
    for name, r in res.items():
        att = [w for w in r["weight_ranks"] if "self_attn" in w["name"]]
        mlp = [w for w in r["weight_ranks"] if ".mlp." in w["name"]]
        m = lambda xs, k: sum(x[k] for x in xs) / len(xs)  # noqa: E731
        print(f"| {name} | {m(att, 'update'):.1f} | {m(mlp, 'update'):.1f} | "
              f"{m(att, 'trained') / m(att, 'base'):.4f} | {m(mlp, 'trained') / m(mlp, 'base'):.4f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
