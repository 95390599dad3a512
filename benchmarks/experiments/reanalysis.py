"""Re-test the seed-level claims of committed records with grpolab.diagnostics.inference (issue 57), and
render the results pages' tables from those records.

Reads only committed JSON records under docs/results/ (no run): per claim, the per-seed values the
record stores, the paired seed-level test (t interval, exact sign-flip p, Holm across the variants
of one comparison, MDE, TOST where the page says "tie"), and the verdict; per multi-variant study
(credit, credit_teacher, real_credit) every variant against the baseline; per paired MiniWoB++
record (several seeds evaluated on the same items) the seed-level test per task with each seed's
exact McNemar test, never items pooled over seeds. A claim whose record stores no per-seed values
is listed under ``unbacked``. docs/statistics.md cites the output; docs/claims.yaml ties the pages'
numbers to it.

    python benchmarks/experiments/reanalysis.py --out docs/results/reanalysis.json --pages

``--pages`` rewrites the tables between ``<!-- reanalysis:ID ... -->`` and ``<!-- /reanalysis:ID -->``
on the pages (docs/results/credit.md, credit_teacher.md, real_credit.md, miniwob_log.md,
web_lr_grid.md); ``--check`` exits 1 where a page's table differs from its records
(tests/docs/test_reanalysis_pages.py does the same).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from grpolab.diagnostics.inference import compare_family, mean_interval, paired_seed_test, shared_items_test
from grpolab.diagnostics.stats import CI
from grpolab.bench import results_path
from grpolab.utils.io import atomic_write_json, atomic_write_text

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
    rl256 = _load("ratio_long.json")["variants"]
    for field in ("final", "auc", "max_drop"):
        out[f"ratio_long_{field}"] = _family("ratio_long.json", rl256, "token", [n for n in rl256 if n != "token"], field,
                                             what=f"157-token drift setting, {field} (256 held-out items), 5 seeds")
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


# --- results pages: tables rendered from their records --------------------------------------------

#: A generated block on a page: ``<!-- reanalysis:ID ... -->`` then the table, then ``<!-- /reanalysis:ID -->``.
BLOCK = re.compile(r"(<!-- reanalysis:(?P<id>[\w.-]+) [^>]*-->\n)(?P<body>.*?)(<!-- /reanalysis:(?P=id) -->)", re.S)


@dataclass(frozen=True)
class PageTable:
    """One table a results page shows, rendered from a committed record (``text``: markdown)."""

    page: str  #: the page, relative to the repository root
    id: str  #: the block's id on that page
    text: str


def _pts(x: float, digits: int = 1) -> str:
    return f"{100 * x:+.{digits}f}"


def _ci(c: CI, digits: int = 3) -> str:
    return f"{c.value:.{digits}f} [{c.low:.{digits}f}, {c.high:.{digits}f}]"


def _pfmt(p: float | None) -> str:
    if p is None:
        return "-"
    if p < 1e-6:
        return "<1e-6"
    return f"{p:.2g}" if p >= 1e-3 else f"{p:.0e}"


def _test_cell(c: dict) -> str:
    """``+7.5 [-4.8, +19.8] (4 up, 1 down)`` for a comparison's ``to_dict()``."""
    return f"{_pts(c['value'])} [{_pts(c['low'])}, {_pts(c['high'])}] ({c['above']} up, {c['below']} down)"


def _p_cell(c: dict) -> str:
    holm = f"; Holm {_pfmt(c['adjusted_p'])}" if c["adjusted_p"] != c["p_value"] else ""
    return f"t {_pfmt(c['t_p'])}; sign-flip {_pfmt(c['sign_flip_p'])}{holm}"


def credit_variants(record: dict) -> dict[str, dict]:
    """credit.json's per-run list as per-variant lists ordered by seed (``seeds``, ``start``, ``final``, ``best``)."""
    out: dict[str, dict] = {}
    for run in sorted(record["runs"], key=lambda r: r["seed"]):
        v = out.setdefault(run["credit"], {"seeds": [], "start": [], "final": [], "best": []})
        v["seeds"].append(run["seed"])
        for k in ("start", "final", "best"):
            v[k].append(run[f"{k}_accuracy"])
    return out


def study(variants: dict[str, dict], base: str, record: str, what: str) -> dict[str, Any]:
    """Every variant against ``base`` on ``final`` (and ``auc`` where stored), Holm across the variants; the
    mean of each variant's final (t interval) and of its gain over its start."""
    names = [n for n in variants if n != base]
    out: dict[str, Any] = {"record": record, "baseline": base, "what": what, "families": {},
                           "means": {n: {"final": mean_interval(v["final"]).to_dict(),
                                         "gain": mean_interval([f - s for f, s in zip(v["final"], v["start"])]).to_dict(),
                                         **({"auc": mean_interval(v["auc"]).to_dict()} if "auc" in v else {})}
                                     for n, v in variants.items()}}
    for field_ in ("final", "auc"):
        if all(field_ in v for v in variants.values()):
            out["families"][field_] = _family(record, variants, base, names, field_, what=what)["comparisons"]
    return out


def study_table(variants: dict[str, dict], res: dict[str, Any], extra: dict[str, Callable[[dict], str]]) -> str:
    """The page's table: per variant, the finals per seed, their mean and the paired seed-level test against
    the baseline (t interval in points, t and exact sign-flip p, Holm across the variants, the verdict)."""
    has_auc = "auc" in res["families"]
    head = ["variant", "seeds", "start", "final, per seed", "final, mean [95% t]", "final - " + res["baseline"]
            + ", points [95% t]", "p (t; sign-flip; Holm)", "verdict"]
    if has_auc:
        head += ["curve area - " + res["baseline"] + ", points [95% t]", "verdict (area)"]
    head += list(extra)
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, v in variants.items():
        starts = sorted(set(round(s, 3) for s in v["start"]))
        cells = [n, str(len(v["seeds"])), " / ".join(f"{s:.3f}" for s in starts),
                 " ".join(f"{f:.3f}" for f in v["final"]),
                 _ci(CI(**{k: res["means"][n]["final"][k] for k in ("value", "low", "high", "n", "level")}))]
        if n == res["baseline"]:
            cells += ["(baseline)", "", ""] + (["", ""] if has_auc else [])
        else:
            c = res["families"]["final"][n]
            cells += [_test_cell(c), _p_cell(c), c["verdict"]]
            if has_auc:
                a = res["families"]["auc"][n]
                cells += [f"{_pts(a['value'])} [{_pts(a['low'])}, {_pts(a['high'])}]", a["verdict"]]
        cells += [f(v) for f in extra.values()]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _steps_to(v: dict) -> str:
    return ", ".join("-" if s is None else str(s) for s in v["steps_to_baseline_final"])


def _collapsed(v: dict) -> str:
    return f"{v['collapsed']}/{len(v['seeds'])}"


def _max_drop(v: dict) -> str:
    return f"{max(v['max_drop']):.3f}"


def _departed(v: dict) -> str:
    return " ".join(f"{x:.3f}" for x in v.get("metrics", {}).get("credit/segment_token_frac", []) if x is not None)


STUDIES = {  # claim id -> (record, variants key path, baseline, page, what, extra columns)
    "credit_tiny": ("credit.json", None, "grpo", "docs/results/credit.md",
                    "tiny model, 100 steps at 8 prompts x 8, final held-out accuracy (256 items), 5 seeds", {}),
    "credit_teacher_200": ("credit_teacher.json", "variants", "grpo", "docs/results/credit_teacher.md",
                           "tiny model, teacher that reads, 200 steps, final held-out accuracy (256 items), 5 seeds",
                           {"steps to grpo's final": _steps_to, "collapsed": _collapsed}),
    "credit_teacher_50": ("raw/credit_teacher_50steps.json", "variants", "grpo", "docs/results/credit_teacher.md",
                          "tiny model, teacher that reads, 50 steps, final held-out accuracy (256 items), 5 seeds",
                          {"steps to grpo's final": _steps_to, "collapsed": _collapsed}),
    "real_credit": ("real_credit.json", "variants", "grpo", "docs/results/real_credit.md",
                    "SmolLM2 sums, 10 steps, final held-out accuracy (219 items), 3 seeds",
                    {"steps to grpo's final": _steps_to, "largest drop below best (worst seed)": _max_drop,
                     "departed tokens": _departed}),
}


#: the same study table shown on a second page: block id -> (study claim id, page)
STUDY_COPIES = {"credit_tiny_guide": ("credit_tiny", "docs/credit.md")}


def _study_variants(record: str, key: str | None) -> dict[str, dict]:
    rec = _load(record)
    return credit_variants(rec) if key is None else rec[key]


def study_claims() -> dict[str, Any]:
    return {cid: study(_study_variants(rec, key), base, rec, what)
            for cid, (rec, key, base, _, what, _) in STUDIES.items()}


# --- several seeds evaluated on the same items (MiniWoB++) -----------------------------------------

def items_from_counts(row: dict) -> tuple[list[int], list[int]]:
    """One seed's per-item outcomes ``(trained, start)`` rebuilt from a paired record's counts (``n``, ``start``,
    ``trained``, ``gained``, ``lost``). The exact McNemar test and the item-level interval depend on the items
    only through these counts, so the rebuilt items give the same test as the items themselves.

    Raises:
        ValueError: the counts contradict each other (the record is not a paired evaluation).
    """
    n, g, lo = row["n"], row["gained"], row["lost"]
    s = round(row["start"] * n)
    t = round(row["trained"] * n)
    if t != s - lo + g or min(s - lo, n - s - g) < 0:
        raise ValueError(f"{row.get('task')}: counts do not add up (n={n}, start {s}, trained {t}, gained {g}, "
                         f"lost {lo}); not a paired evaluation")
    start = [1] * s + [0] * (n - s)
    trained = [1] * (s - lo) + [0] * lo + [1] * g + [0] * (n - s - g)
    return trained, start


def shared_items(record: str) -> dict[str, Any]:
    """Per task of a paired MiniWoB++ record (``models[*].rows``: every model on the same items), the
    seed-level test of trained minus start with the per-seed exact McNemar tests (Holm across the seeds)."""
    rec = _load(record)
    tasks = [r["task"] for r in rec["models"][0]["rows"]]
    out: dict[str, Any] = {"record": record, "seeds": len(rec["models"]), "tasks": {}}
    for task in tasks:
        rows = [next(r for r in m["rows"] if r["task"] == task) for m in rec["models"]]
        pairs = [items_from_counts(r) for r in rows]
        res = shared_items_test([a for a, _ in pairs], [b for _, b in pairs])
        out["tasks"][task] = {**res.to_dict(), "start": rows[0]["start"], "trained": [r["trained"] for r in rows],
                              "gained": [r["gained"] for r in rows], "lost": [r["lost"] for r in rows],
                              "n": rows[0]["n"]}
    return out


def shared_items_table(res: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """Per task: the start, each seed's accuracy and change, gained/lost and exact McNemar p per seed (Holm
    across the seeds), the mean change over seeds with its t interval and the seed-level p-values."""
    k = res["seeds"]
    head = ["task", "warm start", *[f"seed {i}" for i in range(k)], "gained/lost per seed",
            "McNemar p per seed (Holm)", "mean change, points [95% t]", "seed-level p (t; sign-flip)"]
    if before:
        head.append("mean change before the fixes")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task, t in res["tasks"].items():
        s = t["seed_level"]
        seeds = [f"{a:.3f}" + ("" if abs(a - t["start"]) < 1e-12 else f" ({_pts(a - t['start'])})")
                 for a in t["trained"]]
        gl = "; ".join(f"{g}/{lo}" for g, lo in zip(t["gained"], t["lost"]))
        ps = "; ".join(f"{_pfmt(c['p_value'])} ({_pfmt(h)})" for c, h in zip(t["per_seed"], t["per_seed_holm"]))
        name = f"**{task}**" if task == "all" else task
        cells = [name, f"{t['start']:.3f}", *seeds, gl, ps, f"{_pts(s['value'])} [{_pts(s['low'])}, {_pts(s['high'])}]",
                 f"{_pfmt(s['t_p'])}; {_pfmt(s['sign_flip_p'])}"]
        if before:
            cells.append(_pts(before["tasks"][task]["seed_level"]["value"]))
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


SHARED = {  # claim id -> (record, page, the record it is set beside or None)
    "miniwob_fixed_120": ("raw/miniwob_gain_paired_120_fixed.json", "docs/results/miniwob_log.md",
                          "raw/miniwob_gain_paired_120.json"),
    "miniwob_gain_120": ("raw/miniwob_gain_paired_120.json", "docs/results/miniwob_log.md", None),
    "miniwob_gain_240": ("raw/miniwob_gain_paired_240.json", "docs/results/miniwob_log.md", None),
    "miniwob_text_240": ("raw/miniwob_gain_text_paired_240.json", "docs/results/miniwob_log.md", None),
    "miniwob_web_budget": ("miniwob_paired_web_budget.json", "docs/results/miniwob_log.md", None),
    "web_lr_long_1e-4": ("raw/web_lr_grid_paired_long.json", "docs/results/web_lr_grid.md", None),
    "web_lr_long_3e-4": ("raw/web_lr_grid_paired_long_3e-4.json", "docs/results/web_lr_grid.md", None),
    "web_lr_long_3e-4_kl0.1": ("raw/web_lr_grid_paired_long_3e-4_kl0.1.json", "docs/results/web_lr_grid.md", None),
}


def shared_claims() -> dict[str, Any]:
    return {cid: shared_items(rec) for cid, (rec, _, _) in SHARED.items()}


def page_tables(res: dict[str, Any]) -> list[PageTable]:
    """Every generated table, from the re-analysis ``res`` (:func:`analysis`)."""
    out = []
    for cid, (rec, key, _, page, _, extra) in STUDIES.items():
        out.append(PageTable(page, cid, study_table(_study_variants(rec, key), res["studies"][cid], extra)))
    for block_id, (cid, page) in STUDY_COPIES.items():
        out.append(PageTable(page, block_id, next(t.text for t in out if t.id == cid)))
    by_record = {rec: cid for cid, (rec, _, _) in SHARED.items()}
    for cid, (_, page, before) in SHARED.items():
        prior = res["shared_items"][by_record[before]] if before else None
        out.append(PageTable(page, cid, shared_items_table(res["shared_items"][cid], prior)))
    return out


def render_pages(tables: list[PageTable], root: Path = ROOT) -> dict[str, str]:
    """Each page with its generated blocks replaced by ``tables`` (page -> new text).

    Raises:
        ValueError: a table's block is missing from its page, or a page holds a block no table renders.
    """
    pages: dict[str, str] = {}
    for page in sorted({t.page for t in tables}):
        text = (root / page).read_text()
        mine = {t.id: t.text for t in tables if t.page == page}
        found = [m.group("id") for m in BLOCK.finditer(text)]
        if sorted(found) != sorted(mine):
            raise ValueError(f"{page}: generated blocks {sorted(found)} but the script renders {sorted(mine)}; add "
                             f"'<!-- reanalysis:ID (...) -->' / '<!-- /reanalysis:ID -->' around each table")
        pages[page] = BLOCK.sub(lambda m: m.group(1) + mine[m.group("id")] + "\n" + m.group(4), text)
    return pages


UNBACKED = {
    "aggregation_arith_reverse_balanced": "README/docs/results/aggregation.md: balanced -1.4 (arith) and -1.1 "
    "(reverse) 'paired CIs excluding 0': aggregation_arith.json / aggregation_reverse.json store per-variant "
    "bootstrap intervals, not per-seed finals",
    "ratio_ctpo": "README/docs/results/ratio.md: CTPO -1.3 [-2.2, -0.2] vs token: ratio.json stores no per-seed finals",
    "lr_1e-4_tiny_arith": "README: lr 1e-4 +7.0 points [+4.7, +8.6] on tiny arith, 3 of 3 seeds: no committed record",
}


def analysis() -> dict[str, Any]:
    """The whole re-analysis, as reanalysis.json stores it."""
    return {"name": "reanalysis", "command": "python benchmarks/experiments/reanalysis.py --out "
            "docs/results/reanalysis.json --pages", "claims": claims(), "studies": study_claims(),
            "shared_items": shared_claims(), "unbacked": UNBACKED}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(results_path("reanalysis.json")))
    ap.add_argument("--pages", action="store_true", help="rewrite the generated tables on the results pages")
    ap.add_argument("--check", action="store_true", help="exit 1 where a page's generated table is out of date")
    args = ap.parse_args()
    res = analysis()
    for key, entry in res["claims"].items():
        print(f"## {key} ({entry['record']})")
        for c in ([entry["comparison"]] if "comparison" in entry else entry["comparisons"].values()):
            print("-", c["summary"])
    print("\nunbacked (per-seed values not stored):")
    for key, why in UNBACKED.items():
        print(f"- {key}: {why}")
    pages = render_pages(page_tables(res))
    stale = [p for p, text in pages.items() if (ROOT / p).read_text() != text]
    if args.check:
        print("\n".join(f"out of date: {p}" for p in stale) or "pages up to date")
        sys.exit(1 if stale else 0)
    atomic_write_json(args.out, res)
    if args.pages:
        for p in stale:
            atomic_write_text(ROOT / p, pages[p])
            print(f"rewrote {p}")


if __name__ == "__main__":
    main()
