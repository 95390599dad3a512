"""benchmarks/experiments/miniwob_position.py: where the target element sits vs which element the policy clicks."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "miniwob_position", Path(__file__).parents[2] / "benchmarks" / "experiments" / "miniwob_position.py")
mp = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mp)


def _page(target, texts):
    return {"fields": {"target": target},
            "elements": [{"id": i + 1, "kind": "link", "text": t} for i, t in enumerate(texts)]}


def test_target_id_matches_the_text_ignoring_case_and_space():
    assert mp.target_id(_page("Nam", ["justo.", " nam ", "nam"])) == 2  # the first match
    assert mp.target_id(_page("quis", ["justo.", "nam"])) is None
    assert mp.target_id({"elements": []}) is None


def test_clicked_id_is_the_last_click():
    assert mp.clicked_id("click(2)") == 2
    assert mp.clicked_id("type(1, 'x')\nclick(12)\nclick(3)") == 3
    assert mp.clicked_id("scroll()") is None


def test_by_position_splits_solved_pages_by_the_targets_element_id():
    pages = [_page("a", ["a", "b"]), _page("b", ["a", "b"]), _page("b", ["a", "b", "c"]), _page("z", ["a"])]
    # a policy that always clicks element 2: solves exactly the pages whose target is element 2
    table = mp.by_position(pages, [0.0, 1.0, 1.0, 0.0], ["click(2)", "click(2)", "click(2)", "noop"])
    assert table == {"1": {"n": 1, "solved": 0, "clicked": {"2": 1}},
                     "2": {"n": 2, "solved": 2, "clicked": {"2": 2}},
                     "none": {"n": 1, "solved": 0, "clicked": {"none": 1}}}
    assert list(table) == ["1", "2", "none"]
    with pytest.raises(ValueError):  # one score and one transcript per page
        mp.by_position(pages, [1.0], ["click(1)"])
