"""What the model generates: sample completions during training and completion files from eval.

Like TRL's ``log_completions``: every ``log.completions_every`` steps the trainer appends a few
rows ``{step, prompt, completion, reward, reference}`` to ``RUN_DIR/completions.jsonl`` (one
sampled completion of each of the first ``log.completions_n`` prompt groups) and writes the same
rows as a markdown table to TensorBoard's text tab. ``grpolab eval RUN_DIR --completions FILE``
writes every evaluated completion the same way (one JSON object per line) and prints
:func:`examples_table` of the first few.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

__all__ = ["append_jsonl", "completion_rows", "examples_table", "write_jsonl"]


def completion_rows(items: Sequence, prompts: Sequence[str], completions: Sequence[str], rewards: Sequence[float],
                    *, prompt_index: Sequence[int], n: int | None = None, step: int | None = None) -> list[dict]:
    """One row per prompt group (its first sample, in row order), for the first ``n`` groups
    (None: every row).

    Args:
        items: the prompt items; row ``i`` of ``completions`` answers ``items[prompt_index[i]]``
            (:attr:`grpolab.rollout.experience.Experience.prompt_index`).
        prompts: the prompt text each item was shown (chat-rendered when a template is used).
        completions, rewards: one per row.
    """
    rows, seen = [], set()
    for i, g in enumerate(int(x) for x in prompt_index):
        if n is not None:
            if g in seen:
                continue
            if len(seen) == n:
                break
            seen.add(g)
        row = {"prompt": prompts[g], "completion": completions[i], "reward": float(rewards[i]),
               "reference": items[g].reference}
        if step is not None:
            row = {"step": step, **row}
        rows.append(row)
    return rows


def append_jsonl(path: str | Path, rows: Sequence[dict]) -> None:
    """Append ``rows`` to a JSON-lines file, one line per row, flushed and fsynced (a crash loses at
    most the rows being written, never an earlier line)."""
    import os

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_jsonl(path: str | Path, rows: Sequence[dict]) -> None:
    """Write ``rows`` as a JSON-lines file atomically (readers see the old file or the new one)."""
    from grpolab.utils.io import atomic_write_text

    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _cell(text: str, width: int) -> str:
    text = str(text).replace("\n", "\\n").replace("|", "\\|")
    return text if len(text) <= width else text[: width - 3] + "..."


def examples_table(rows: Sequence[dict], *, width: int = 60, prompt_tail: bool = True) -> str:
    """A markdown table of rows (prompt, completion, reward, reference); long cells are cut.

    ``prompt_tail``: show the end of long prompts (where a chat template puts the question).
    """
    lines = ["| prompt | completion | reward | reference |", "|---|---|---|---|"]
    for r in rows:
        p = str(r["prompt"])
        if prompt_tail and len(p) > width:
            p = "..." + p[-(width - 3):]
        lines.append(f"| {_cell(p, width)} | {_cell(r['completion'], width)} | {r['reward']:.2f} | "
                     f"{_cell(r['reference'], 20)} |")
    return "\n".join(lines)
