"""Where metrics go: JSONL (always), TensorBoard event files, Weights & Biases (optional)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from grpolab.utils.io import atomic_write_text


def _clean(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def keep_rows_through(path: str | Path, step: int | None) -> int:
    """Rewrite the JSON-lines file ``path`` keeping the rows of steps ``<= step`` (a resumed run
    writes the later steps again, once); ``step=None`` removes the file (a run that starts over).
    A line that does not parse -- the half-written last line of a killed process -- is dropped;
    returns how many were. Rows without a ``step`` stay."""
    path = Path(path)
    if not path.exists():
        return 0
    if step is None:
        path.unlink()
        return 0
    kept, broken = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            broken += 1
            continue
        if not isinstance(row, dict) or row.get("step", -1) is None or row.get("step", -1) <= step:
            kept.append(line)
    atomic_write_text(path, "".join(line + "\n" for line in kept))
    return broken


class MetricsLog:
    """Appends one JSON object per step to ``metrics.jsonl`` and mirrors scalars to TB / wandb.

    Every row carries the same keys: ``schema`` (the keys a run may log) plus every key seen so
    far; a key a step did not compute is written as null (NaN), never left out.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "grpolab",
        config: dict[str, Any] | None = None,
        resume_step: int | None = None,
        wandb_entity: str = "",
        wandb_run_name: str = "",
        wandb_mode: str = "online",
        schema: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.keys: dict[str, None] = dict.fromkeys(schema)
        self.path = Path(run_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # a resumed run drops the rows written after its checkpoint (the log then matches a run that was
        # never interrupted) and a half-written last line; a run that starts over, the whole file
        self.dropped_lines = keep_rows_through(self.path, resume_step)
        self._fh = self.path.open("a", encoding="utf-8")
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(run_dir) / "tb"))
            except ImportError:  # tensorboard not installed: JSONL still has everything
                self._tb = None
        self._wandb = None
        if wandb:
            try:
                import wandb as wb
            except ImportError as e:
                raise ImportError("log.wandb=true needs Weights & Biases: pip install 'grpolab[wandb]' "
                                  "or set log.wandb=false") from e
            self._wandb = wb.init(project=wandb_project, entity=wandb_entity or None, name=wandb_run_name or None,
                                  mode=wandb_mode, config=config or {}, dir=str(run_dir), resume="allow")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.keys.update(dict.fromkeys(metrics))
        row = {"step": step, **{k: _clean(metrics.get(k, math.nan)) for k in self.keys}}
        self._fh.write(json.dumps(row) + "\n")
        self._fh.flush()
        scalars = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(scalars, step=step)

    def text(self, tag: str, text: str, step: int) -> None:
        """A text entry (markdown) in TensorBoard's text tab (and wandb's, as HTML-free text)."""
        if self._tb is not None:
            self._tb.add_text(tag, text, step)
        if self._wandb is not None:
            self._wandb.log({tag: text}, step=step)

    def close(self) -> None:
        self._fh.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """The rows of ``RUN_DIR/metrics.jsonl``; a line that does not parse (half-written by a killed
    process) is left out."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows
