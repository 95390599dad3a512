"""studies/web_lr_grid_tables.py: task groups from a headroom report, per-run outcomes overall and per
group, cells and main effects, on a tiny hand-computed sweep."""

import importlib.util
import json
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "web_lr_grid_tables", Path(__file__).parents[2] / "studies" / "web_lr_grid_tables.py")
wt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(wt)


def _fam(solved: dict[str, int], n: int = 10) -> dict:
    # as the trainer writes them: plain task names (the headroom report prefixes "family=")
    return {t: {"accuracy": s / n, "solved": s, "n": n} for t, s in solved.items()}


def _headroom(greedy: dict[str, float], verdicts: dict[str, str]) -> dict:
    ci = lambda v: {"value": v, "low": v, "high": v}  # noqa: E731
    return {"overall": {"greedy": ci(sum(greedy.values()) / len(greedy))},
            "families": {f"family={t}": {"k": 8, "greedy": ci(g), "sampled": ci(g - 0.05),
                                         "pass_at_k": {"8": ci(min(1.0, g + 0.3))},
                                         "gap_pass_at_k_minus_greedy": ci(min(1.0, g + 0.3) - g),
                                         "verdict": verdicts[t]} for t, g in greedy.items()}}


def _run(out, name, factors, seed, start, final):
    d = out / "runs" / name
    d.mkdir(parents=True)
    n = sum(start.values()) / 40, sum(final.values()) / 40
    (d / "result.json").write_text(json.dumps({"start_accuracy": n[0], "final_accuracy": n[1],
                                               "start_families": _fam(start), "final_families": _fam(final)}))
    return {"name": name, "factors": factors, "seed": seed}


def test_groups_outcomes_and_effects(tmp_path, capsys):
    hr = _headroom({"a": 1.0, "b": 0.9, "c": 0.3, "d": 0.5},
                   {"a": "saturated", "b": "no headroom", "c": "pass@k headroom", "d": "unclear"})
    assert wt.task_groups(hr) == {"mastered": ["a", "b"], "headroom": ["c"], "other": ["d"]}
    # greedy >= 0.8 alone is not "mastered": the verdict must say there is no headroom
    assert wt.task_groups(_headroom({"a": 0.85}, {"a": "headroom"}))["headroom"] == ["a"]

    assert wt.outcome(0.6, 0.2) == "collapse" and wt.outcome(0.6, 0.6, collapsed=True) == "collapse"
    assert wt.outcome(0.6, 0.55) == "degrade" and wt.outcome(0.6, 0.65) == "improve"
    assert wt.outcome(0.6, 0.64) == "neutral"

    out = tmp_path / "sweep"
    f = lambda lr, kl: {"model.path": "runs/ws", "optim.lr": lr, "objective.kl_coef": kl}  # noqa: E731
    start = {"a": 10, "b": 9, "c": 3, "d": 5}
    runs = [
        _run(out, "r0", f("1e-4", "0"), 0, start, {"a": 10, "b": 9, "c": 6, "d": 5}),  # headroom +30
        _run(out, "r1", f("1e-4", "0.1"), 1, start, {"a": 10, "b": 8, "c": 4, "d": 5}),
        _run(out, "r2", f("1e-3", "0"), 1, start, {"a": 4, "b": 3, "c": 1, "d": 2}),  # mastered 19 -> 7
        _run(out, "r3", f("1e-3", "0.1"), 0, start, {"a": 9, "b": 9, "c": 3, "d": 5}),
    ]
    runs.append({"name": "unfinished", "factors": f("1e-3", "0"), "seed": 2})
    (out / "sweep.json").write_text(json.dumps({"factors": [{"key": "model.path", "values": ["runs/ws"]},
                                                            {"key": "optim.lr", "values": ["1e-4", "1e-3"]},
                                                            {"key": "objective.kl_coef", "values": ["0", "0.1"]}],
                                                "runs": runs}))
    (out / "summary.json").write_text(json.dumps({"runs": [{"name": "r3", "collapse": "entropy collapse"}]}))
    d = wt.build(out, {"runs/ws": hr}, [])
    rows = {r["name"]: r for r in d["runs"]}
    assert set(rows) == {"r0", "r1", "r2", "r3"}
    assert rows["r0"]["headroom"] == {"start": 0.3, "final": 0.6, "change": pytest.approx(0.3), "outcome": "improve"}
    assert rows["r0"]["mastered"]["outcome"] == "neutral" and rows["r0"]["outcome"] == "improve"  # 27/40 -> 30/40
    assert rows["r2"]["mastered"] == {"start": 0.95, "final": 0.35, "change": pytest.approx(-0.6),
                                      "outcome": "collapse"}
    assert rows["r3"]["outcome"] == "collapse"  # the sweep's collapse label wins over a small change
    assert d["precondition"] == {"ws_greedy": pytest.approx(0.675), "ws_mastered_tasks": 2, "ws_headroom_tasks": 1,
                                 "ws_mastered_greedy": pytest.approx(0.95),
                                 "ws_mastered_pass_at_k_minus_greedy": pytest.approx(0.05),
                                 "ws_headroom_greedy": 0.3, "ws_headroom_pass_at_k_minus_greedy": pytest.approx(0.3)}
    cell = d["variants"]["ws,lr=1e-4"]
    assert cell["seeds"] == [0, 1] and cell["headroom_change"] == [pytest.approx(0.3), pytest.approx(0.1)]
    lr = {e["value"]: e for e in d["main_effects"]["optim.lr"]}
    assert lr["1e-3"]["collapsed"] == 2 and lr["1e-4"]["collapsed"] == 0
    assert lr["1e-4"]["headroom_change"]["value"] == pytest.approx(0.2)
    pred = {p["task"]: p for p in d["headroom_prediction"]}
    assert pred["c"]["verdict"] == "pass@k headroom"
    assert pred["c"]["mean_change_by_lr"] == {"1e-4": pytest.approx(0.2), "1e-3": pytest.approx(-0.1)}
    # with the paired benchmark: per task and lr, the mean change and the summed gained / lost seeds
    prow = lambda t, s, tr, g, l: {"task": t, "n": 10, "start": s, "trained": tr, "gained": g, "lost": l}  # noqa: E731
    paired = {"runs/ws": {"per_task": 10, "models": [
        {"model": f"{out}/runs/r0/final", "rows": [prow("c", 0.3, 0.6, 4, 1)]},
        {"model": f"{out}/runs/r1/final", "rows": [prow("c", 0.3, 0.4, 2, 1)]}]}}
    pred = {p["task"]: p for p in wt.prediction(d["runs"], {"runs/ws": hr}, paired)}
    assert pred["c"]["paired_by_lr"] == {"1e-4": {"mean_change": pytest.approx(0.2), "gained": 6, "lost": 2}}
    assert "paired_by_lr" not in pred["a"]  # no paired rows for that task
    wt.print_tables(d)
    printed = capsys.readouterr().out
    assert "| ws | 1e-3 | 0 | - | 1 | 0.675 -> 0.250 | 0.950 -> 0.350 | 0.300 -> 0.100 | collapse / collapse / collapse |" in printed


def test_paired_groups_sum_tasks_and_test_them():
    row = lambda t, n, s, tr, g, l: {"task": t, "n": n, "start": s, "trained": tr, "gained": g, "lost": l}  # noqa: E731
    paired = {"per_task": 10, "models": [{"model": "runs/sw/runs/r0/final", "rows": [
        row("a", 10, 1.0, 0.5, 0, 5), row("b", 10, 0.9, 0.9, 1, 1), row("c", 10, 0.2, 0.6, 4, 0),
        row("all", 30, 0.7, 2 / 3, 5, 6)]}]}
    res = wt.paired_groups(paired, {"mastered": ["a", "b"], "headroom": ["c"]})["r0"]
    assert res["mastered"] == {"n": 20, "start": pytest.approx(0.95), "trained": pytest.approx(0.7),
                               "change": pytest.approx(-0.25), "gained": 1, "lost": 6,
                               "p_mcnemar": pytest.approx(0.125)}  # 2 * P(X <= 1), X ~ Bin(7, 1/2) = 16/128
    assert res["headroom"]["gained"] == 4 and res["headroom"]["p_mcnemar"] == pytest.approx(0.125)
    assert res["all"]["n"] == 30 and res["all"]["lost"] == 6
