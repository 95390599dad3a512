"""summary.md's per-task table finds the headroom verdict of every family kind (issue 35:
difficulty-keyed tasks such as the default arith showed "not measured")."""

from grpolab.train.report import per_task_markdown, per_task_rows


def _h(verdict):
    return {"verdict": verdict, "n_items": 8, "k": 8, "greedy": {"value": 0.25}, "sampled": {"value": 0.5},
            "pass_at_k": {"8": {"value": 0.75}}}


def test_difficulty_keyed_families_get_their_headroom_verdict():
    start = {"1": {"accuracy": 0.5, "solved": 4, "n": 8}, "2": {"accuracy": 0.25, "solved": 2, "n": 8}}
    final = {"1": {"accuracy": 0.75, "solved": 6, "n": 8}, "2": {"accuracy": 0.25, "solved": 2, "n": 8}}
    headroom = {"families": {"difficulty=1": _h("headroom"), "difficulty=2": _h("no headroom")}}
    rows = per_task_rows(start, final, headroom)
    assert [r["headroom_verdict"] for r in rows] == ["headroom", "no headroom"]
    assert rows[0]["headroom_pass_at_k"] == 0.75 and rows[0]["change"] == 0.25
    assert "not measured" not in "\n".join(per_task_markdown(rows, k=8))


def test_family_keyed_and_plain_keys_still_found():
    start = {"click-button": {"accuracy": 0.5, "solved": 4, "n": 8}, "x": {"accuracy": 0.5, "solved": 4, "n": 8}}
    rows = per_task_rows(start, start, {"families": {"family=click-button": _h("headroom"), "x": _h("mastered")}})
    assert [r["headroom_verdict"] for r in rows] == ["headroom", "mastered"]
