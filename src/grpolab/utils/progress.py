"""Progress that reads well in a log file: one line every N steps, with the rate and an ETA.

A tqdm bar redraws itself with ``\\r``; written to a file (``grpolab train > log 2>&1``, a batch
job) it becomes one line of hundreds of states. :func:`progress_bar` returns a tqdm bar when
stderr is a terminal and a :class:`LineProgress` otherwise; both take ``update``,
``set_postfix``, ``write`` and ``close``.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

__all__ = ["LineProgress", "format_seconds", "progress_bar"]


def format_seconds(s: float) -> str:
    """``75 -> "1m15s"``, ``3700 -> "1h01m"``, ``9 -> "9s"``."""
    s = max(0, int(round(s)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class LineProgress:
    """``desc step i/total (p%) key=value ... mean 1.2 s/step, elapsed 48s, ETA 7m12s`` every ``every``
    steps and at the last one, through ``log`` (with ``unit="item"``: ``desc i/total items ...``,
    for counts that advance by more than one at a time).

    Args:
        total: steps in all.
        initial: steps already done (a resumed run); the rate counts only this process's steps.
        every: steps between lines (0 = about 20 lines over the run).
        desc: what is progressing (``grpo``, ``warm start``, ``eval``).
        log: where lines go (``print``).
        clock: the time source (tests pass a fake one).
        unit: what is counted (``step``, ``item``).
    """

    def __init__(self, total: int, *, initial: int = 0, every: int = 0, desc: str = "",
                 log: Callable[[str], None] = print, clock: Callable[[], float] = time.time,
                 unit: str = "step") -> None:
        self.total, self.n, self.start_n, self.unit = total, initial, initial, unit
        self.every = every if every > 0 else max(1, total // 20)
        self.desc, self.log, self.clock = desc, log, clock
        self.t0 = clock()
        self.postfix: dict[str, str] = {}

    def set_postfix(self, **kw) -> None:
        self.postfix = {k: str(v) for k, v in kw.items()}

    def update(self, n: int = 1) -> None:
        before, self.n = self.n, self.n + n
        if self.n // self.every > before // self.every or self.n >= self.total:
            self.log(self.line())

    def line(self) -> str:
        done = self.n - self.start_n
        elapsed = self.clock() - self.t0
        rate = elapsed / done if done > 0 else float("nan")
        eta = rate * (self.total - self.n) if done > 0 else float("nan")
        pct = 100 * self.n / self.total if self.total else 100.0
        post = " ".join(f"{k}={v}" for k, v in self.postfix.items())
        # "mean": over every step of this process, evaluations included (a postfix may show the last step's own time)
        timing = (f"mean {rate:.2f} s/{self.unit}, elapsed {format_seconds(elapsed)}, ETA {format_seconds(eta)}"
                  if done > 0 else "")
        if self.unit == "step":
            head = f"{self.desc} step {self.n}/{self.total}" if self.desc else f"step {self.n}/{self.total}"
        else:
            head = f"{self.desc} {self.n}/{self.total} {self.unit}s".strip()
        return " ".join(x for x in (f"{head} ({pct:.0f}%)", post, timing) if x)

    def write(self, msg: str) -> None:
        self.log(msg)

    def close(self) -> None:
        pass


def progress_bar(total: int, *, initial: int = 0, desc: str = "", every: int = 0,
                 log: Callable[[str], None] = print, tty: bool | None = None):
    """A tqdm bar on a terminal, else a :class:`LineProgress` (``tty=None``: ask ``sys.stderr``)."""
    if tty is None:
        tty = sys.stderr.isatty()
    if tty:
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, dynamic_ncols=True)
    return LineProgress(total, initial=initial, every=every, desc=desc, log=log)
