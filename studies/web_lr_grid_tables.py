"""Tables and JSON of the learning-rate grid on a web agent (docs/results/web_lr_grid.md).

    python studies/web_lr_grid_tables.py runs/web_lr_grid \
        --headroom runs/ws_ch100=runs/hr_ws_ch100/headroom.json --headroom runs/ws_ch300=runs/hr_ws_ch300/headroom.json \
        [--paired runs/ws_ch100=PAIRED_JSON ...] [--diagnose RUN_DIR ...] [--command "grpolab sweep ..."] \
        [--json docs/results/web_lr_grid.json]

Reads the sweep (``sweep.json``, each finished run's ``result.json`` with per-task success before
and after, and ``summary.json`` for the collapse labels), the headroom report of each warm start
(measured before any run, on the same 160 held-out items the runs evaluate) and, for the runs
given, their ``diagnose.json``. Tasks are split per warm start into

- **mastered**: greedy success >= 0.8 and no headroom (the verdict is "saturated" or "no headroom"),
- **headroom**: the verdict is "headroom" or "pass@k headroom",

and each run's change (final - start, greedy, the same items) is reported overall and per group;
with ``--paired`` (``benchmarks/experiments/miniwob_paired.py`` on more held-out seeds), also the per-group
gained / lost seeds and McNemar's exact test.
A run's outcome, overall and per group: **collapse** (the sweep's collapse label, or final below
half of start), else **degrade** / **improve** when the change is at most -DELTA / at least
+DELTA, else **neutral**.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from grpolab.diagnostics import mean_interval
from grpolab.utils.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]

DELTA = 0.05  # a change of 5 points or more counts (about one standard error of a 160-item difference)
WARM = "model.path"
LR = "optim.lr"


def task_groups(headroom: dict) -> dict[str, list[str]]:
    """``{"mastered": [...], "headroom": [...], "other": [...]}`` from one headroom.json."""
    out: dict[str, list[str]] = {"mastered": [], "headroom": [], "other": []}
    for fam, s in headroom["families"].items():
        task = fam.split("=", 1)[-1]
        verdict = s.get("verdict", "")
        if s["greedy"]["value"] >= 0.8 and verdict in ("saturated", "no headroom"):
            out["mastered"].append(task)
        elif verdict in ("headroom", "pass@k headroom"):
            out["headroom"].append(task)
        else:
            out["other"].append(task)
    return out


def _plain(families: dict) -> dict:
    """Family keys without the ``family=`` prefix (headroom reports carry it, run results do not)."""
    return {k.split("=", 1)[-1]: v for k, v in families.items()}


def _group_success(families: dict, tasks: list[str]) -> float:
    fams = _plain(families)
    solved = sum(fams[t]["solved"] for t in tasks if t in fams)
    n = sum(fams[t]["n"] for t in tasks if t in fams)
    return solved / n if n else float("nan")


def outcome(start: float, final: float, collapsed: bool = False, delta: float = DELTA) -> str:
    if collapsed or (start > 0 and final < 0.5 * start):
        return "collapse"
    if final - start <= -delta + 1e-12:
        return "degrade"
    if final - start >= delta - 1e-12:
        return "improve"
    return "neutral"


def collect(out: Path, groups_by_warm: dict[str, dict[str, list[str]]]) -> list[dict[str, Any]]:
    """One row per finished run: factors, seed, overall and per-group start/final/change/outcome."""
    plan = json.loads((out / "sweep.json").read_text())
    summary = out / "summary.json"
    labels = {r["name"]: r for r in json.loads(summary.read_text())["runs"]} if summary.exists() else {}
    rows = []
    for spec in plan["runs"]:
        res_path = out / "runs" / spec["name"] / "result.json"
        if not res_path.exists():
            continue
        res = json.loads(res_path.read_text())
        lab = labels.get(spec["name"], {})
        collapsed = lab.get("collapse", "-") != "-"
        row: dict[str, Any] = {"name": spec["name"], **spec["factors"], "seed": spec["seed"],
                               "start": res["start_accuracy"], "final": res["final_accuracy"],
                               "change": res["final_accuracy"] - res["start_accuracy"],
                               "collapse_label": lab.get("collapse", "-"),
                               "outcome": outcome(res["start_accuracy"], res["final_accuracy"], collapsed)}
        sf, ff = res.get("start_families", {}), res.get("final_families", {})
        sf, ff = _plain(sf), _plain(ff)
        row["tasks"] = {t: {"start": sf[t]["accuracy"], "final": ff[t]["accuracy"]} for t in ff if t in sf}
        for g, tasks in groups_by_warm[spec["factors"][WARM]].items():
            if not tasks:
                continue
            s, f = _group_success(sf, tasks), _group_success(ff, tasks)
            row[g] = {"start": s, "final": f, "change": f - s, "outcome": outcome(s, f, collapsed)}
        rows.append(row)
    return rows


def _ci(xs: list[float]) -> dict:
    return mean_interval(xs).to_dict()


def cells(rows: list[dict], a: str, b: str) -> list[dict]:
    """Per (a, b) level pair: seeds, final, change overall and per group, outcomes."""
    out = []
    for va in dict.fromkeys(r[a] for r in rows):
        for vb in dict.fromkeys(r[b] for r in rows):
            sel = [r for r in rows if r[a] == va and r[b] == vb]
            if not sel:
                continue
            cell = {a: va, b: vb, "seeds": [r["seed"] for r in sel], "final": [r["final"] for r in sel],
                    "change": [r["change"] for r in sel], "outcomes": [r["outcome"] for r in sel]}
            for g in ("mastered", "headroom"):
                if all(g in r for r in sel):
                    cell[f"{g}_change"] = [r[g]["change"] for r in sel]
                    cell[f"{g}_outcomes"] = [r[g]["outcome"] for r in sel]
            out.append(cell)
    return out


def main_effects(rows: list[dict], keys: list[str]) -> dict[str, list[dict]]:
    eff = {}
    for k in keys:
        eff[k] = []
        for v in dict.fromkeys(r[k] for r in rows):
            sel = [r for r in rows if r[k] == v]
            e = {"value": v, "runs": len(sel), "change": _ci([r["change"] for r in sel])}
            for g in ("mastered", "headroom"):
                if all(g in r for r in sel):
                    e[f"{g}_change"] = _ci([r[g]["change"] for r in sel])
            e["collapsed"] = sum(r["outcome"] == "collapse" for r in sel)
            eff[k].append(e)
    return eff


def prediction(rows: list[dict], headrooms: dict[str, dict], paired: dict[str, dict] | None = None) -> list[dict]:
    """Per warm start and task: the verdict before training and the mean change over runs at each lr
    (on the runs' own held-out items, and with ``paired`` on the paired benchmark's seeds too)."""
    out = []
    for warm, hr in headrooms.items():
        per_model = {}
        if paired and warm in paired:
            per_model = {Path(m["model"]).parent.name: {r["task"]: r for r in m["rows"]} for m in paired[warm]["models"]}
        for fam, s in hr["families"].items():
            task = fam.split("=", 1)[-1]
            sel = [r for r in rows if r[WARM] == warm and task in r["tasks"]]
            by_lr, paired_by_lr = {}, {}
            for lr in dict.fromkeys(r[LR] for r in sel):
                xs = [r["tasks"][task]["final"] - r["tasks"][task]["start"] for r in sel if r[LR] == lr]
                by_lr[lr] = sum(xs) / len(xs)
                ps = [per_model[r["name"]][task] for r in sel
                      if r[LR] == lr and task in per_model.get(r["name"], {})]
                if ps:
                    paired_by_lr[lr] = {"mean_change": sum(p["trained"] - p["start"] for p in ps) / len(ps),
                                        "gained": sum(p["gained"] for p in ps), "lost": sum(p["lost"] for p in ps)}
            entry = {"warm_start": warm, "task": task, "verdict": s.get("verdict", ""),
                     "greedy": s["greedy"]["value"], "sampled": s["sampled"]["value"],
                     "pass_at_k": s["pass_at_k"][str(s["k"])]["value"], "mean_change_by_lr": by_lr}
            if paired_by_lr:
                entry["paired_by_lr"] = paired_by_lr
            out.append(entry)
    return out


def paired_groups(paired: dict, groups: dict[str, list[str]]) -> dict[str, dict]:
    """Per trained model of a ``benchmarks/experiments/miniwob_paired.py`` output: start, trained, gained, lost and
    McNemar's exact p on the mastered tasks, the headroom tasks and all, summed over their tasks."""
    from grpolab.diagnostics import mcnemar_exact

    out = {}
    for m in paired["models"]:
        rows = {r["task"]: r for r in m["rows"]}
        res = {}
        for g, tasks in (*groups.items(), ("all", None)):
            sel = [rows["all"]] if tasks is None else [rows[t] for t in tasks if t in rows]
            if not sel:
                continue
            n = sum(r["n"] for r in sel)
            start = sum(r["start"] * r["n"] for r in sel) / n
            trained = sum(r["trained"] * r["n"] for r in sel) / n
            gained, lost = sum(r["gained"] for r in sel), sum(r["lost"] for r in sel)
            res[g] = {"n": n, "start": start, "trained": trained, "change": trained - start, "gained": gained,
                      "lost": lost, "p_mcnemar": mcnemar_exact(gained, lost)}
        out[str(Path(m["model"]).parent.name)] = res
    return out


def build(out: Path, headrooms: dict[str, dict], diagnose: list[Path],
          paired: dict[str, dict] | None = None) -> dict[str, Any]:
    groups = {w: task_groups(h) for w, h in headrooms.items()}
    rows = collect(out, groups)
    for warm, pj in (paired or {}).items():
        by_run = paired_groups(pj, {g: t for g, t in groups[warm].items() if g != "other"})
        for r in rows:
            if r["name"] in by_run:
                r["paired"] = by_run[r["name"]]
    plan = json.loads((out / "sweep.json").read_text())
    keys = [f["key"] for f in plan["factors"]]
    pre: dict[str, Any] = {}
    for w, g in groups.items():
        tag = Path(w).name
        h = headrooms[w]
        pre[f"{tag}_greedy"] = h["overall"]["greedy"]["value"]
        pre[f"{tag}_mastered_tasks"] = len(g["mastered"])
        pre[f"{tag}_headroom_tasks"] = len(g["headroom"])
        fam = h["families"]
        for grp in ("mastered", "headroom"):
            if g[grp]:
                pre[f"{tag}_{grp}_greedy"] = sum(fam[f"family={t}"]["greedy"]["value"] for t in g[grp]) / len(g[grp])
                pre[f"{tag}_{grp}_pass_at_k_minus_greedy"] = sum(
                    fam[f"family={t}"]["gap_pass_at_k_minus_greedy"]["value"] for t in g[grp]) / len(g[grp])
    diag = {}
    for d in diagnose:
        j = json.loads((Path(d) / "diagnose.json").read_text())
        c = j["causal"]
        diag[Path(d).name] = {"base": c["base"]["value"], "trained": c["trained"]["value"],
                              "revert": {k: v["revert"]["value"] for k, v in c["groups"].items()},
                              "transplant": {k: v["transplant"]["value"] for k, v in c["groups"].items()},
                              "drift": {x["group"]: x["relative"] for x in j["drift"]}}
    variants = {f"{Path(c[WARM]).name},lr={c[LR]}": c for c in cells(rows, WARM, LR)}
    if paired:
        pre["paired_seeds_per_task"] = next(iter(paired.values()))["per_task"]
    return {"name": "web_lr_grid", "precondition": pre, "task_groups": groups, "variants": variants,
            "main_effects": main_effects(rows, keys), "headroom_prediction": prediction(rows, headrooms, paired),
            "runs": rows, "diagnose": diag, "delta": DELTA}


def _setting(r: dict) -> str:
    return (f"| {Path(r[WARM]).name} | {r[LR]} | {r.get('objective.kl_coef', '-')} | "
            f"{r.get('objective.clip_high', '-')} | {r['seed']} |")


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def print_tables(d: dict) -> None:
    """The tables of docs/results/web_lr_grid.md, in its order."""
    head = "| warm start | lr | KL | clip_high | seed |"
    print("### runs (the runs' own 160 held-out items)\n")
    print(head + " all: start -> final | mastered | headroom | outcome (all / mastered / headroom) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in d["runs"]:
        m, h = r.get("mastered", {}), r.get("headroom", {})
        g = lambda x: f"{x['start']:.3f} -> {x['final']:.3f}" if x else "-"  # noqa: E731
        print(f"{_setting(r)} {r['start']:.3f} -> {r['final']:.3f} | {g(m)} | {g(h)} | "
              f"{r['outcome']} / {m.get('outcome', '-')} / {h.get('outcome', '-')} |")
    if any("paired" in r for r in d["runs"]):
        print("\n### paired (change in points, gained / lost seeds, McNemar p)\n")
        print(head + " mastered | headroom | all |")
        print("|---|---|---|---|---|---|---|---|")
        for r in d["runs"]:
            p = r.get("paired")
            if not p:
                continue
            c = lambda x: f"{_pts(x['change'])} ({x['gained']}/{x['lost']}, p {x['p_mcnemar']:.2g})"  # noqa: E731
            print(f"{_setting(r)} {c(p['mastered'])} | {c(p['headroom'])} | {c(p['all'])} |")
    print("\n### cells: warm start x lr (change in points per run: paired where measured, else 160 items)\n")
    print("| warm start | lr | KL, clip_high, seed of its runs | mastered | headroom | all | outcomes (160 items) |")
    print("|---|---|---|---|---|---|---|")
    for c in d["variants"].values():
        sel = [r for r in d["runs"] if r[WARM] == c[WARM] and r[LR] == c[LR]]
        def ch(g):
            return " ".join(_pts(r["paired"][g]["change"]) if "paired" in r else
                            _pts(r[g]["change"] if g != "all" else r["change"]) for r in sel)
        print(f"| {Path(c[WARM]).name} | {c[LR]} | " + "; ".join(
            f"{r.get('objective.kl_coef', '-')}, {r.get('objective.clip_high', '-')}, {r['seed']}" for r in sel)
              + f" | {ch('mastered')} | {ch('headroom')} | {ch('all')} | {', '.join(c['outcomes'])} |")
    print("\n### main effects (160 items; mean change in points over the level's runs, 95% bootstrap CI)\n")
    print("| factor | level | runs | all | mastered | headroom | collapsed |")
    print("|---|---|---|---|---|---|---|")
    for k, levels in d["main_effects"].items():
        for e in levels:
            ci = lambda x: f"{_pts(x['value'])} [{_pts(x['low'])}, {_pts(x['high'])}]"  # noqa: E731
            print(f"| {k} | {e['value']} | {e['runs']} | {ci(e['change'])} | "
                  f"{ci(e['mastered_change']) if 'mastered_change' in e else '-'} | "
                  f"{ci(e['headroom_change']) if 'headroom_change' in e else '-'} | {e['collapsed']}/{e['runs']} |")
    if d.get("diagnose"):
        groups = list(next(iter(d["diagnose"].values()))["revert"])
        print("\n### diagnose (160 items)\n")
        print("| run | base | trained | " + " | ".join(f"revert {g}" for g in groups) + " | "
              + " | ".join(f"transplant {g}" for g in groups) + " |")
        print("|---|---|---|" + "---|" * (2 * len(groups)))
        for name, x in d["diagnose"].items():
            print(f"| {name} | {x['base']:.3f} | {x['trained']:.3f} | "
                  + " | ".join(f"{x['revert'][g]:.3f}" for g in groups) + " | "
                  + " | ".join(f"{x['transplant'][g]:.3f}" for g in groups) + " |")
    print("\n### headroom verdict vs outcome, per task\n")
    print("| warm start | task | verdict | greedy / sampled / pass@8 | change by lr, 160 items | "
          "change by lr, paired (gained/lost) |")
    print("|---|---|---|---|---|---|")
    for p in d["headroom_prediction"]:
        paired = ", ".join(f"{lr}: {_pts(v['mean_change'])} ({v['gained']}/{v['lost']})"
                           for lr, v in p.get("paired_by_lr", {}).items()) or "-"
        print(f"| {Path(p['warm_start']).name} | {p['task']} | {p['verdict']} | "
              f"{p['greedy']:.2f} / {p['sampled']:.2f} / {p['pass_at_k']:.2f} | "
              + ", ".join(f"{lr}: {_pts(v)}" for lr, v in p["mean_change_by_lr"].items()) + f" | {paired} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep")
    ap.add_argument("--headroom", action="append", default=[], metavar="WARM_START=HEADROOM_JSON", required=True)
    ap.add_argument("--diagnose", action="append", default=[], metavar="RUN_DIR")
    ap.add_argument("--paired", action="append", default=[], metavar="WARM_START=PAIRED_JSON",
                    help="benchmarks/experiments/miniwob_paired.py output for the runs from that warm start")
    ap.add_argument("--command", default="")
    ap.add_argument("--json", default=None, help="write (merge into) this JSON file")
    a = ap.parse_args(argv)
    headrooms = {}
    for kv in a.headroom:
        warm, path = kv.split("=", 1)
        headrooms[warm] = json.loads(Path(path).read_text())
    paired = {}
    for kv in a.paired:
        warm, path = kv.split("=", 1)
        paired[warm] = json.loads(Path(path).read_text())
    d = build(Path(a.sweep), headrooms, [Path(p) for p in a.diagnose], paired)
    print_tables(d)
    if a.json:
        path = Path(a.json)
        old = json.loads(path.read_text()) if path.exists() else {}
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        old.update({**d, "command": a.command or old.get("command", ""), "commit": commit})
        atomic_write_json(path, old)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
