"""Tasks from local dataset files (JSON lines, JSON, Parquet) via Hugging Face ``datasets``.

``load_dataset_task("gsm8k_train.jsonl", prompt_field="question", answer_field="answer")``
reads the file with ``datasets.load_dataset("json" | "parquet", data_files=...)`` (local files
only, nothing is downloaded), turns each row into a :class:`TaskItem`, and splits train/eval by
prompt with a fixed seed (:func:`grpolab.tasks.base.split_by_prompt`), or takes eval from a
second file (``eval_path``; eval rows whose prompt also occurs in train are dropped).

Conversational rows in TRL's format load directly: when the prompt column holds a list of
``{"role", "content"}`` messages, the item keeps the conversation (``item.messages``; the run's
:class:`~grpolab.tasks.PromptFormat` renders it with the tokenizer's chat template) and its
``prompt`` is the last user turn. An optional ``completion`` column (a list of assistant messages
or a string; TRL's prompt-completion format) becomes the demonstration unless
``demonstration_field`` names another column.

GSM8K-style answers (a worked solution whose last line is ``#### <final answer>``) are split with
``answer_format="auto"`` (default): the reference is the final answer and the whole solution is
the privileged context (the RLSD/GEAR teacher's reference solution). ``answer_format="raw"``
keeps the answer as it is.

Row rules: the prompt must be a non-empty string or a conversation; the answer a string or a number (numbers are
converted with ``str``), or a list / object (JSON-encoded into the reference string: the
``code``, ``sql`` and ``json_schema`` rewards decode it); optional privileged/demonstration
fields must be strings or null. A row that breaks them raises ValueError naming the row index
and the file, or with ``on_bad_row="skip"`` is skipped and counted (``task.skipped_rows`` lists
the indices).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from grpolab.tasks.base import StaticTask, TaskItem, _check_fraction, register_task, split_by_prompt

__all__ = ["DatasetTask", "JsonlTask", "load_dataset_task"]

_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
ANSWER_FORMATS = ("auto", "raw")
#: GSM8K's final-answer line: ``#### 72`` at the end of the worked solution.
_GSM8K_FINAL = re.compile(r"(?:^|\n)####\s*(.+?)\s*$", re.DOTALL)


def split_final_answer(answer: str) -> tuple[str, str]:
    """``(final_answer, worked_solution)`` of a GSM8K-style answer, or ``(answer, "")`` otherwise."""
    m = _GSM8K_FINAL.search(answer)
    if m is None or "\n" in m.group(1).strip():
        return answer, ""
    return m.group(1).strip(), answer


class DatasetTask(StaticTask):
    """A :class:`StaticTask` read from a file; see :func:`load_dataset_task`.

    Attributes:
        path: the source file.
        skipped_rows: indices of rows skipped with ``on_bad_row="skip"`` (train file), and
            ``skipped_eval_rows`` for ``eval_path``.
        dropped_eval_duplicates: eval rows dropped because their prompt is also a train prompt.
    """

    def __init__(
        self,
        name: str,
        train: Sequence[TaskItem],
        eval: Sequence[TaskItem],
        *,
        path: Path,
        skipped_rows: list[int],
        skipped_eval_rows: list[int] | None = None,
        dropped_eval_duplicates: int = 0,
    ) -> None:
        super().__init__(name, train, eval)
        self.path = path
        self.skipped_rows = skipped_rows
        self.skipped_eval_rows = skipped_eval_rows or []
        self.dropped_eval_duplicates = dropped_eval_duplicates


#: The brief's name for it: the same class serves .jsonl, .json and .parquet.
JsonlTask = DatasetTask


def _infer_format(path: Path, format: str | None) -> str:
    if format is not None:
        if format not in ("json", "parquet"):
            raise ValueError(f"format must be 'json', 'parquet' or None, got {format!r}")
        return format
    fmt = _FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ValueError(
            f"cannot infer the format of {str(path)!r} from its suffix {path.suffix!r}; "
            f"use one of {sorted(_FORMATS)} or pass format='json' / format='parquet'"
        )
    return fmt


def _read_rows(path: Path, format: str | None, on_bad_row: str = "raise") -> tuple[list[str], dict[str, list[Any]]]:
    """``(column_names, {column: values})`` of a local file: JSON lines read here, line by line (a
    broken line is named by its line number, or with ``on_bad_row="skip"`` becomes an empty row
    that the row check skips and counts); other formats via ``datasets.load_dataset``."""
    if not path.exists():
        raise FileNotFoundError(f"dataset file {str(path)!r} does not exist")
    if not path.is_file():
        raise ValueError(f"dataset path {str(path)!r} is not a file")
    fmt = _infer_format(path, format)
    if path.suffix.lower() in (".jsonl", ".ndjson") and fmt == "json":
        return _read_json_lines(path, on_bad_row)
    if path.stat().st_size == 0:
        raise ValueError(f"dataset file {str(path)!r} is empty: it has no rows")
    from datasets import load_dataset

    try:
        ds = load_dataset(fmt, data_files=str(path), split="train")
    except Exception as exc:  # datasets raises a zoo of types (even StopIteration when empty)
        raise ValueError(
            f"could not read {str(path)!r} as {fmt}: {type(exc).__name__}: {exc} "
            "(is the file empty or malformed? JSON lines need one object per line)"
        ) from exc
    columns = list(ds.column_names)
    return columns, {c: list(ds[c]) for c in columns}


def _read_json_lines(path: Path, on_bad_row: str) -> tuple[list[str], dict[str, list[Any]]]:
    import json

    rows: list[dict[str, Any] | None] = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"a JSON {type(row).__name__}, not an object")
            except ValueError as e:
                if on_bad_row == "skip":
                    rows.append(None)
                    continue
                what = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
                raise ValueError(f"{str(path)!r} line {lineno} (row {len(rows)}) is not a JSON object: {what}; fix "
                                 "the row or pass on_bad_row='skip'") from None
            rows.append(row)
    if not rows:
        raise ValueError(f"dataset file {str(path)!r} is empty: it has no rows (JSON lines: one object per line)")
    columns = list(dict.fromkeys(k for r in rows if r is not None for k in r))
    return columns, {c: [None if r is None else r.get(c) for r in rows] for c in columns}


def _rows_to_items(
    path: Path,
    *,
    prompt_field: str,
    answer_field: str,
    privileged_field: str | None,
    demonstration_field: str | None,
    meta_fields: Sequence[str],
    reward: str,
    reward_options: dict[str, Any],
    format: str | None,
    on_bad_row: str,
    answer_format: str = "auto",
) -> tuple[list[TaskItem], list[int]]:
    columns, data = _read_rows(path, format, on_bad_row)
    if demonstration_field is None and "completion" in data and prompt_field in data and any(
            isinstance(v, list) for v in data[prompt_field][:1]):
        demonstration_field = "completion"  # TRL's conversational prompt-completion format
    wanted = [("prompt_field", prompt_field), ("answer_field", answer_field)]
    wanted += [("privileged_field", privileged_field), ("demonstration_field", demonstration_field)]
    wanted += [("meta_fields", f) for f in meta_fields]
    for label, fname in wanted:
        if fname is not None and fname not in data:
            raise ValueError(
                f"{label}={fname!r} is not a column of {str(path)!r}; available columns: {columns}"
            )
    n_rows = len(data[prompt_field])
    items: list[TaskItem] = []
    skipped: list[int] = []
    for i in range(n_rows):
        try:
            items.append(
                _row_to_item(
                    data,
                    i,
                    path,
                    prompt_field,
                    answer_field,
                    privileged_field,
                    demonstration_field,
                    meta_fields,
                    reward,
                    reward_options,
                    answer_format,
                )
            )
        except ValueError:
            if on_bad_row == "skip":
                skipped.append(i)
                continue
            raise
    return items, skipped


def _row_to_item(
    data,
    i,
    path,
    prompt_field,
    answer_field,
    privileged_field,
    demonstration_field,
    meta_fields,
    reward,
    reward_options,
    answer_format="auto",
) -> TaskItem:
    from grpolab.tasks.prompt import check_messages

    where = f"row {i} of {str(path)!r}"
    prompt = data[prompt_field][i]
    messages = None
    if isinstance(prompt, (list, tuple)):  # TRL conversational format
        try:
            messages = check_messages(prompt, f"{where}: {prompt_field!r}")
        except ValueError as e:
            raise ValueError(f"{e}; fix the row or pass on_bad_row='skip'") from None
        prompt = [m["content"] for m in messages if m["role"] == "user"][-1]
    if not isinstance(prompt, str) or not prompt:
        raise ValueError(
            f"{where}: {prompt_field!r} must be a non-empty string or a list of {{role, content}} messages, "
            f"got {type(prompt).__name__} {prompt!r:.80}; fix the row or pass on_bad_row='skip'"
        )
    answer = data[answer_field][i]
    if (isinstance(answer, float) and answer != answer) or (isinstance(answer, str) and answer.strip().lower() in
                                                            ("nan", "+nan", "-nan")):
        raise ValueError(f"{where}: {answer_field!r} is NaN (a missing value?), which no completion can match; "
                         "fix the row or pass on_bad_row='skip'")
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)
    if isinstance(answer, (list, dict)):  # structured references (code tests, sql, json_schema)
        answer = json.dumps(answer)
    if not isinstance(answer, str):
        raise ValueError(
            f"{where}: {answer_field!r} must be a string, a number, a list or an object, got "
            f"{type(answer).__name__} {answer!r:.80}; fix the row or pass on_bad_row='skip'"
        )
    optional = {}
    for label, fname in (("privileged", privileged_field), ("demonstration", demonstration_field)):
        value = data[fname][i] if fname is not None else None
        if isinstance(value, list) and label == "demonstration":  # a TRL completion: assistant messages
            value = "".join(m.get("content", "") for m in value if isinstance(m, dict)
                            and m.get("role") == "assistant") or None
        if value is not None and not isinstance(value, str):
            raise ValueError(
                f"{where}: {fname!r} must be a string or null, got {type(value).__name__}; "
                "fix the row or pass on_bad_row='skip'"
            )
        optional[label] = value or ""
    meta = {"source": str(path), "row": i}
    meta.update({f: data[f][i] for f in meta_fields})
    reference, solution = answer.strip(), ""
    if answer_format == "auto":
        reference, solution = split_final_answer(reference)
    return TaskItem(
        prompt=prompt,
        reference=reference,
        privileged=optional["privileged"] or solution or optional["demonstration"] or reference,
        reward=reward,
        demonstration=optional["demonstration"],
        meta=meta,
        reward_options=dict(reward_options),
        messages=messages,
    )


@register_task("dataset")
def load_dataset_task(
    path,
    *,
    prompt_field: str = "prompt",
    answer_field: str = "answer",
    privileged_field: str | None = None,
    demonstration_field: str | None = None,
    meta_fields: Sequence[str] = (),
    reward: str = "math",
    reward_options: dict[str, Any] | None = None,
    format: str | None = None,
    eval_fraction: float = 0.1,
    eval_path=None,
    seed: int = 0,
    on_bad_row: str = "raise",
    name: str | None = None,
    answer_format: str = "auto",
) -> DatasetTask:
    """Build a task from a local ``.jsonl`` / ``.json`` / ``.parquet`` file.

    Args:
        path: the data file.
        prompt_field, answer_field: columns holding the prompt and the final answer.
        privileged_field: column with teacher context; default: the demonstration if any, else
            the answer.
        demonstration_field: column with a full correct completion (for warm start); default "".
        meta_fields: columns copied into each item's ``meta`` (plus ``source`` and ``row``).
        reward: reward registry name for every item (default "math").
        reward_options: keyword options for the reward, the same for every item.
        format: "json" or "parquet"; None infers it from the suffix.
        eval_fraction: share of unique prompts held out for eval (ignored with ``eval_path``).
        eval_path: optional separate eval file with the same columns.
        seed: fixes the split and the item order.
        on_bad_row: "raise" (default; "error" is the same) or "skip" (skipped rows, broken JSON lines
            included, are counted in the task).
        name: task name; default ``"dataset:<file stem>"``.
        answer_format: "auto" splits GSM8K-style ``#### <answer>`` lines off worked solutions (the
            final answer is the reference, the solution the privileged context); "raw" keeps the
            answer column as the reference.

    Raises:
        FileNotFoundError: ``path`` (or ``eval_path``) is missing.
        ValueError: a field is not a column (the message names the field, the file and the
            available columns); a bad row with ``on_bad_row="raise"`` (names the row index);
            an unreadable file.
    """
    if on_bad_row == "error":  # the word the README used
        on_bad_row = "raise"
    if on_bad_row not in ("raise", "skip"):
        raise ValueError(f"on_bad_row must be 'raise' (or 'error') or 'skip', got {on_bad_row!r}")
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(f"answer_format must be one of {ANSWER_FORMATS}, got {answer_format!r}")
    _check_fraction(eval_fraction)
    if isinstance(meta_fields, str):
        meta_fields = (meta_fields,)
    path = Path(path)
    common = dict(
        prompt_field=prompt_field,
        answer_field=answer_field,
        privileged_field=privileged_field,
        demonstration_field=demonstration_field,
        meta_fields=tuple(meta_fields),
        reward=reward,
        reward_options=dict(reward_options or {}),
        format=format,
        on_bad_row=on_bad_row,
        answer_format=answer_format,
    )
    items, skipped = _rows_to_items(path, **common)
    if not items:
        raise ValueError(
            f"{str(path)!r} yielded no usable rows ({len(skipped)} skipped as bad); "
            "check the field names and the data"
        )
    skipped_eval: list[int] = []
    dropped = 0
    if eval_path is None:
        train, evals = split_by_prompt(items, eval_fraction, seed)
    else:
        eval_items, skipped_eval = _rows_to_items(Path(eval_path), **common)
        train_prompts = {item.prompt for item in items}
        kept = [item for item in eval_items if item.prompt not in train_prompts]
        dropped = len(eval_items) - len(kept)
        train, _ = split_by_prompt(items, 0.0, seed)
        evals, _ = split_by_prompt(kept, 0.0, seed)
    return DatasetTask(
        name or f"dataset:{path.stem}",
        train,
        evals,
        path=path,
        skipped_rows=skipped,
        skipped_eval_rows=skipped_eval,
        dropped_eval_duplicates=dropped,
    )
