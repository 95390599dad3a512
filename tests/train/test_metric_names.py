"""verl-style metric aliases, same keys on every row, completion rows and tables."""

import json
import math

from grpolab.tasks import TaskItem
from grpolab.train.completions import append_jsonl, completion_rows, examples_table, write_jsonl
from grpolab.step_row import VERL_NAMES, fill_row, with_verl_names


def test_verl_aliases_carry_grpolabs_values():
    row = {"update/clip_frac_low": 0.1, "update/clip_frac_high": 0.25, "update/approx_kl": 0.003,
           "reward/mean": 0.5, "length/mean": 17.0, "time/rollout": 1.5, "other": 3.0}
    out = with_verl_names(row)
    assert out["actor/pg_clipfrac"] == 0.1 + 0.25
    assert out["actor/ppo_kl"] == 0.003 and out["critic/score/mean"] == 0.5
    assert out["response_length/mean"] == 17.0 and out["timing_s/gen"] == 1.5
    assert out["other"] == 3.0 and row == {k: out[k] for k in row}     # grpolab's names stay
    assert "actor/pg_loss" not in out                                   # nothing invented
    assert len(set(VERL_NAMES.values())) == len(VERL_NAMES)             # no two keys map to one name


def test_fill_row_gives_every_row_the_same_keys():
    schema = ["a", "b", "c"]
    rows = [fill_row({"a": 1.0, "b": 2.0}, schema), fill_row({"a": 1.0, "c": 3.0, "d": 4.0}, schema)]
    assert set(rows[0]) == {"a", "b", "c"} and math.isnan(rows[0]["c"])
    assert math.isnan(rows[1]["b"]) and rows[1]["d"] == 4.0
    # NaN survives a JSON round trip as grpolab's metrics.jsonl writes it
    assert math.isnan(json.loads(json.dumps(rows[0]))["c"])


def test_completion_rows_take_one_sample_per_group(tmp_path):
    items = [TaskItem(prompt=f"q{i}", reference=str(i)) for i in range(3)]
    comps = [f"c{i}" for i in range(6)]
    rows = completion_rows(items, ["p0", "p1", "p2"], comps, [0, 1, 0, 0, 1, 1], prompt_index=[0, 0, 1, 1, 2, 2],
                           n=2, step=7)
    assert rows == [{"step": 7, "prompt": "p0", "completion": "c0", "reward": 0.0, "reference": "0"},
                    {"step": 7, "prompt": "p1", "completion": "c2", "reward": 0.0, "reference": "1"}]
    assert len(completion_rows(items, ["p0", "p1", "p2"], comps, [0] * 6, prompt_index=[0, 0, 1, 1, 2, 2])) == 6
    # rows join items through the row -> item index, not through the group size
    mixed = completion_rows(items, ["p0", "p1", "p2"], comps, [0, 1, 0, 0, 1, 1], prompt_index=[2, 0, 2, 0, 1, 1], n=2)
    assert [(r["prompt"], r["completion"], r["reference"]) for r in mixed] == [("p2", "c0", "2"), ("p0", "c1", "0")]
    p = tmp_path / "c.jsonl"
    append_jsonl(p, rows[:1])
    append_jsonl(p, rows[1:])
    assert [json.loads(x) for x in p.read_text().splitlines()] == rows
    write_jsonl(p, rows[:1])
    assert len(p.read_text().splitlines()) == 1
    table = examples_table([{"prompt": "x" * 100 + "END", "completion": "a|b\nc", "reward": 1.0, "reference": "5"}])
    assert "END" in table and "a\\|b\\nc" in table and table.count("\n") == 2
