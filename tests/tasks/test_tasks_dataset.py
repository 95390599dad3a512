"""load_dataset_task: formats, field mapping, fixed split, and errors that name the problem."""

import json

import pytest

from grpolab.tasks import DatasetTask, JsonlTask, get_task, load_dataset_task


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


ROWS = [
    {"question": f"q{i}?", "final": str(i * 7), "work": f"{i}*7={i * 7}#{i * 7}"} for i in range(40)
]


@pytest.fixture
def jsonl(tmp_path):
    return _write_jsonl(tmp_path / "data.jsonl", ROWS)


def test_fields_and_items(jsonl):
    task = load_dataset_task(
        jsonl, prompt_field="question", answer_field="final", demonstration_field="work", seed=1
    )
    assert isinstance(task, DatasetTask) and JsonlTask is DatasetTask
    assert task.name == "dataset:data"
    assert task.available("train") + task.available("eval") == 40
    assert task.available("eval") == 4
    item = task.items("train", 1)[0]
    row = ROWS[item.meta["row"]]
    assert item.prompt == row["question"] and item.reference == row["final"]
    assert item.demonstration == row["work"] and item.privileged == row["work"]
    assert item.reward == "math" and item.meta["source"] == str(jsonl)
    assert item.score(item.demonstration).score == 1.0


def test_split_is_fixed_disjoint_and_seeded(jsonl):
    kw = dict(prompt_field="question", answer_field="final")
    a = load_dataset_task(jsonl, seed=0, **kw)
    b = load_dataset_task(jsonl, seed=0, **kw)
    c = load_dataset_task(jsonl, seed=5, **kw)
    for split in ("train", "eval"):
        assert a.items(split, a.available(split)) == b.items(split, b.available(split))
    train = {i.prompt for i in a.items("train", 36)}
    evals = {i.prompt for i in a.items("eval", 4)}
    assert train.isdisjoint(evals) and len(train | evals) == 40
    assert evals != {i.prompt for i in c.items("eval", 4)}
    with pytest.raises(ValueError, match="only 4 eval items"):
        a.items("eval", 5)


def test_duplicate_prompts_stay_in_one_split(tmp_path):
    rows = [{"prompt": f"p{i % 10}", "answer": str(i)} for i in range(30)]  # each prompt x3
    task = load_dataset_task(_write_jsonl(tmp_path / "d.jsonl", rows), eval_fraction=0.3)
    train = [i.prompt for i in task.items("train", task.available("train"))]
    evals = [i.prompt for i in task.items("eval", task.available("eval"))]
    assert set(train).isdisjoint(evals) and len(evals) == 9 and len(train) == 21


def test_json_array_and_parquet(tmp_path):
    rows = [{"prompt": f"p{i}", "answer": i} for i in range(10)]  # numeric answers -> str
    (tmp_path / "d.json").write_text(json.dumps(rows))
    task = load_dataset_task(tmp_path / "d.json", eval_fraction=0.2)
    assert sorted(i.reference for i in task.items("train", 8) + task.items("eval", 2)) == sorted(
        str(i) for i in range(10)
    )

    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"problem": ["a", "b", "c"], "solution": ["1", "2", "3"]}), tmp_path / "d.parquet"
    )
    task = load_dataset_task(
        tmp_path / "d.parquet",
        prompt_field="problem",
        answer_field="solution",
        eval_fraction=0.0,
        reward="exact",
    )
    assert {i.prompt for i in task.items("train", 3)} == {"a", "b", "c"}
    assert task.available("eval") == 0 and task.items("train", 1)[0].reward == "exact"


def test_missing_field_names_field_file_and_columns(jsonl):
    with pytest.raises(ValueError) as err:
        load_dataset_task(jsonl, prompt_field="question", answer_field="answer")
    msg = str(err.value)
    assert "'answer'" in msg and str(jsonl) in msg and "['question', 'final', 'work']" in msg
    with pytest.raises(ValueError, match="demonstration_field='solution'"):
        load_dataset_task(
            jsonl, prompt_field="question", answer_field="final", demonstration_field="solution"
        )


@pytest.mark.parametrize("bad", [None, 5, "", ["list"]])
def test_bad_prompt_row_raise_or_skip(tmp_path, bad):
    rows = [{"prompt": f"p{i}", "answer": "1"} for i in range(6)]
    rows[3]["prompt"] = bad
    path = _write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 3 of .*bad\.jsonl.*'prompt'"):
        load_dataset_task(path)
    task = load_dataset_task(path, on_bad_row="skip", eval_fraction=0.0)
    assert task.skipped_rows == [3] and task.available("train") == 5


def test_null_answer_row(tmp_path):
    rows = [{"prompt": "a", "answer": "1"}, {"prompt": "b", "answer": None}]
    path = _write_jsonl(tmp_path / "n.jsonl", rows)
    with pytest.raises(ValueError, match=r"row 1 .*'answer'"):
        load_dataset_task(path)


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_dataset_task(tmp_path / "missing.jsonl")
    (tmp_path / "d.txt").write_text('{"prompt": "a", "answer": "1"}\n')
    with pytest.raises(ValueError, match="format"):
        load_dataset_task(tmp_path / "d.txt")
    assert (
        load_dataset_task(tmp_path / "d.txt", format="json", eval_fraction=0).available("train")
        == 1
    )
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(ValueError, match="empty.jsonl' is empty: it has no rows"):  # not a StopIteration
        load_dataset_task(tmp_path / "empty.jsonl")
    (tmp_path / "blank.jsonl").write_text("\n  \n")
    with pytest.raises(ValueError, match="is empty"):
        load_dataset_task(tmp_path / "blank.jsonl")
    (tmp_path / "broken.jsonl").write_text('{"prompt": "a"\n')
    with pytest.raises(ValueError, match=r"broken.jsonl' line 1 \(row 0\) is not a JSON object: .*on_bad_row='skip'"):
        load_dataset_task(tmp_path / "broken.jsonl")
    with pytest.raises(ValueError, match="on_bad_row must be 'raise' \\(or 'error'\\) or 'skip'"):
        load_dataset_task(tmp_path / "d.txt", format="json", on_bad_row="ignore")


def test_broken_json_line_named_by_line_and_skipped_with_skip(tmp_path):
    rows = ['{"prompt": "p0", "answer": "1"}', "", '{"prompt": "p1", "answer": 2', "[1, 2]",
            '{"prompt": "p3", "answer": "3"}']
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"line 3 \(row 1\) is not a JSON object"):
        load_dataset_task(path, eval_fraction=0)
    task = load_dataset_task(path, eval_fraction=0, on_bad_row="skip")
    assert task.available("train") == 2 and task.skipped_rows == [1, 2]
    # the README's word for the default
    with pytest.raises(ValueError, match="line 3"):
        load_dataset_task(path, eval_fraction=0, on_bad_row="error")


def test_eval_file_drops_train_duplicates(tmp_path):
    train = _write_jsonl(
        tmp_path / "train.jsonl", [{"prompt": f"p{i}", "answer": "1"} for i in range(10)]
    )
    evals = _write_jsonl(
        tmp_path / "test.jsonl", [{"prompt": f"p{i}", "answer": "1"} for i in range(8, 14)]
    )
    task = get_task("dataset", path=train, eval_path=evals)
    assert task.available("train") == 10 and task.available("eval") == 4
    assert task.dropped_eval_duplicates == 2
    assert {i.prompt for i in task.items("eval", 4)} == {"p10", "p11", "p12", "p13"}
