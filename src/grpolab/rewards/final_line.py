"""The ``final_line`` verifier: the answer is the response's last line, in one of three exact forms.

For short-answer tasks where a small instruct model answers in its own words (the "short_arith"
task, docs/real-models.md). Only the last non-empty line counts, with one trailing period removed;
it must be

* the number itself: ``"18"``;
* an answer line: ``"Answer: 18"`` (case-insensitive ``answer``, optional ``#``/``####`` instead);
* the question's own expression equals the number: ``"3 + 15 = 18"`` (``expression`` option, the
  expression as the question writes it; spaces are ignored).

Anything else scores 0, even when it holds the right number: a sum restated with other operands
(``"3 + 16 = 18"``), the number inside a sentence (``"The answer is 18, not 17"``), a right line
followed by more text (``"3 + 15 = 18\\nThis is a classic example"``), or a different number of the
same value (``"18.0"``, ``"018"``). The right number in the wrong place is wrong: a "last number
in the text" rule gives reward to responses like ``"3 + 15 is 18, which is equal to 1"`` or
wrong arithmetic whose last number happens to match.
"""

from __future__ import annotations

import re

from grpolab.rewards.base import RewardResult, register_reward

__all__ = ["final_line", "final_line_reward"]

_ANSWER_RE = re.compile(r"(?:answer\s*:|#{1,4})\s*(\S+)", re.IGNORECASE)
_EQUATION_RE = re.compile(r"(.+?)=\s*(\S+)")


def final_line(completion: str) -> str:
    """The last non-empty line of ``completion``, stripped, without one trailing period."""
    lines = [ln.strip() for ln in completion.strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    last = lines[-1]
    return last[:-1].rstrip() if last.endswith(".") else last


@register_reward("final_line")
def final_line_reward(completion: str, reference: str, *, expression: str = "") -> RewardResult:
    """1.0 when the last line is ``reference``, ``Answer: reference`` or ``EXPRESSION = reference``."""
    if not isinstance(completion, str) or not isinstance(reference, str):
        raise TypeError("the final_line reward needs the completion and the reference as str")
    want = reference.strip()
    line = final_line(completion)
    info: dict = {"line": line[:200]}
    if not line:
        info["form"] = "empty"
        return RewardResult(0.0, info)
    if line == want:
        info["form"] = "number"
        return RewardResult(1.0, info)
    m = _ANSWER_RE.fullmatch(line)
    if m:
        info.update(form="answer line", extracted=m.group(1))
        return RewardResult(float(m.group(1) == want), info)
    m = _EQUATION_RE.fullmatch(line)
    if m and expression:
        lhs = re.sub(r"\s+", "", m.group(1))
        if lhs == re.sub(r"\s+", "", expression):
            info.update(form="equation", extracted=m.group(2))
            return RewardResult(float(m.group(2) == want), info)
        info.update(form="other equation", extracted=m.group(2))
        return RewardResult(0.0, info)
    info["form"] = "other"
    return RewardResult(0.0, info)
