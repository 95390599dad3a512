"""Re-test the seed-level claims of committed records with grpolab.diagnostics.inference (issue 57).

Reads only committed JSON records under docs/results/ (no run): per claim, the per-seed values the
record stores, the paired seed-level test (t interval, exact sign-flip p, Holm across the variants
of one comparison, MDE, TOST where the page says "tie"), and the verdict. A claim whose record
stores no per-seed values is listed under ``unbacked``. docs/statistics.md cites the output.

    python benchmarks/experiments/reanalysis.py --out docs/results/reanalysis.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from grpolab.diagnostics.inference import compare_family, paired_seed_test
from grpolab.bench import results_path
from grpolab.utils.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "results"  # read only: the committed records re-tested


def _load(name: str) -> dict[str, Any]:
    return json.loads((RECORDS / name).read_text())


def _family(record: str, variants: dict[str, dict], base: str, names: list[str], field: str, *,
            what: str, margin: float | None = None) -> dict[str, Any]:
    """Each of ``names`` minus ``base`` on ``variants[v][field]`` (per seed, paired by the record's seeds)."""
    fam = {}
    for n in names:
        a, b = variants[n], variants[base]
        if a["seeds"] != b["seeds"]:
            raise ValueError(f"{record}: {n} and {base} have different seeds ({a['seeds']} vs {b['seeds']})")
        fam[n] = (a[field], b[field])
    res = compare_family(fam, margin=margin)
    return {"record": record, "field": f"variants.<name>.{field}", "baseline": base, "what": what,
            "comparisons": {n: {**c.to_dict(), "summary": c.summary(scale=100, what=f"{n} - {base} (points)")}
                            for n, c in res.items()}}


def claims() -> dict[str, Any]:
    rcr = _load("real_credit_reads.json")["variants"]
    agg = _load("aggregation_coupled.json")["variants"]
    rl = _load("ratio_long.json")["final_1024"]["variants"]
    trl = _load("real_model_vs_trl.json")["sides"]
    web = _load("web_lr_grid.json")["longer_runs"]
    out: dict[str, Any] = {
        "gear_vs_grpo_smollm2": _family("real_credit_reads.json", rcr, "grpo",
                                        [n for n in rcr if n != "grpo"], "final",
                                        what="SmolLM2 worked sums, final held-out accuracy, 5 seeds"),
        "aggregation_pairsum": _family("aggregation_coupled.json", agg, "token",
                                       [n for n in agg if n != "token"], "final",
                                       what="pairsum, final held-out accuracy (256 items), 5 seeds"),
        "ratio_long_final_1024": _family("ratio_long.json", rl, "token", [n for n in rl if n != "token"], "final",
                                         what="157-token drift setting, final accuracy on 1,024 items, 5 seeds"),
    }
    out["ratio_long_final_1024"]["field"] = "final_1024.variants.<name>.final"
    c = paired_seed_test(trl["grpolab"]["final"], trl["trl"]["final"], margin=0.05)
    out["grpolab_vs_trl"] = {"record": "real_model_vs_trl.json", "field": "sides.<side>.final",
                             "what": "SmolLM2 sums, final accuracy on 219 items, 3 seeds; TOST margin 5 points",
                             "comparison": {**c.to_dict(), "summary": c.summary(scale=100, what="grpolab - TRL (points)")}}
    heads = [web["paired"][f"lr=1e-4,seed={s}"]["headroom"] for s in web["seeds"]]
    c = paired_seed_test([h["trained"] for h in heads], [h["start"] for h in heads])
    out["web_lr_90_steps_headroom"] = {
        "record": "web_lr_grid.json", "field": "longer_runs.paired.<run>.headroom.{trained,start}",
        "what": "MiniWoB++ headroom tasks, 90 steps at lr 1e-4, 3 seeds on the same 400 items; the seed-level "
                "test (the pooled McNemar treated the seeds' shared items as independent)",
        "per_seed_mcnemar_p": [h["p_mcnemar"] for h in heads],
        "comparison": {**c.to_dict(), "summary": c.summary(scale=100, what="trained - start (points)")}}
    return out


UNBACKED = {
    "aggregation_arith_reverse_balanced": "README/docs/results/aggregation.md: balanced -1.4 (arith) and -1.1 "
    "(reverse) 'paired CIs excluding 0': aggregation_arith.json / aggregation_reverse.json store per-variant "
    "bootstrap intervals, not per-seed finals",
    "ratio_ctpo": "README/docs/results/ratio.md: CTPO -1.3 [-2.2, -0.2] vs token: ratio.json stores no per-seed finals",
    "lr_1e-4_tiny_arith": "README: lr 1e-4 +7.0 points [+4.7, +8.6] on tiny arith, 3 of 3 seeds: no committed record",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(results_path("reanalysis.json")))
    args = ap.parse_args()
    res = claims()
    for key, entry in res.items():
        print(f"## {key} ({entry['record']})")
        for c in ([entry["comparison"]] if "comparison" in entry else entry["comparisons"].values()):
            print("-", c["summary"])
    print("\nunbacked (per-seed values not stored):")
    for key, why in UNBACKED.items():
        print(f"- {key}: {why}")
    atomic_write_json(args.out, {"name": "reanalysis", "command": "python benchmarks/experiments/reanalysis.py "
                                 "--out docs/results/reanalysis.json", "claims": res, "unbacked": UNBACKED})


if __name__ == "__main__":
    main()
