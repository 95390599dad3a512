"""Find the first *error* in a worked answer by re-deriving it (docs/credit.md, "Readability that can fail").

The first-departure label of :func:`grpolab.diagnostics.readability.first_wrong_token` marks where a
response stops copying the reference text, so a correct answer in other words "departs" as much as
a wrong one. A re-deriver reads the numbers a response writes instead: it parses each claim
(an equation, a written digit, a carry, the final answer), recomputes it from the problem and the
response's *own* previous steps, and returns where the first wrong number starts to be wrong.
A response that reaches the right answer by right steps has no error, whatever its wording.

One re-deriver per worked-answer format, in :data:`REDERIVERS` keyed by task name:

* ``"short_arith"`` -- :func:`grpolab.tasks.short_arith.worked_solution`'s format
  (``"7 + 8 = 15: write 5, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\\nAnswer: 55"``), read loosely:
  every ``x + y [+ c] = z`` (or ``x - y [- c]: borrow 10, z``) anywhere is an equation to recompute
  (``x + y = u + v`` compares the two sides' values; a wrong one points at ``u``);
  an equation whose operands are all single digits is a *column step* whose operands must be the
  column's digits and the carry (or borrow) the response's previous column produced (the first two
  operands may come in either order); ``write d`` / ``carry c`` must follow from the last column
  value; an equation after "So" must restate the question's sum; a last line that states an answer
  (``N``, ``Answer: N``, ``... answer is N``, ``A + B = N``) holds the final answer, which must be the true result;
* ``"arith"`` -- the scratchpad ``"7+5=12;12-3=9#9"``: step ``k`` must start from the previous
  step's written result (the prompt's first number for step 0), apply the prompt's ``k``-th
  operator and operand, and compute right; the number after ``#`` must be the true result.

The error position is the first *wrong character* of the first wrong number (``"16"`` for ``15``
points at the ``6``; a number too long or too short points at its first differing digit, clamped to
the number). A number that touches the end of a response cut at the length cap (``finished=False``)
is not judged (it may be incomplete), and a cut response has no final answer. Pure: strings in, a :class:`Rederivation` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

__all__ = ["REDERIVERS", "Rederivation", "register_rederiver", "rederive", "rederive_arith",
           "rederive_short_arith"]


@dataclass(frozen=True)
class Rederivation:
    """What re-deriving one response found.

    Attributes:
        error_char: index in the response text of the first wrong character of the first wrong
            number; None when every checked claim is right.
        error_kind: ``"equation"`` (the arithmetic of a written equation), ``"column"`` (an operand
            that is not the column's digit or carry), ``"write"``, ``"carry"``, ``"summary"`` (the
            restated question), ``"step"`` (arith: an operand not the running total / the prompt's),
            ``"final"``; None without an error.
        written, expected: the wrong number as written and the number that belonged there.
        claims: how many claims were checked up to the first error (or in all).
        final_answer: the final answer as written (the number a last line states as the answer;
            arith: after ``#``), None when the response has none (cut short, prose, ``"37 = 37"``).
        final_correct: ``final_answer`` is the true result.
    """

    error_char: int | None
    error_kind: str | None
    written: str | None
    expected: str | None
    claims: int
    final_answer: str | None
    final_correct: bool

    @property
    def has_error(self) -> bool:
        return self.error_char is not None

    @property
    def correct(self) -> bool:
        """Right steps and a right final answer."""
        return self.error_char is None and self.final_correct


#: task name -> re-deriver ``fn(prompt, text, finished) -> Rederivation``.
REDERIVERS: dict[str, Callable[[str, str, bool], Rederivation]] = {}


def register_rederiver(task: str):
    """Decorator: register ``fn(prompt, text, finished) -> Rederivation`` for ``task``'s worked answers."""
    def deco(fn):
        REDERIVERS[task] = fn
        return fn
    return deco


def rederive(task: str, prompt: str, text: str, *, finished: bool = True) -> Rederivation:
    """Re-derive ``text``, a response to ``prompt`` of task ``task`` (see the module docstring).

    Args:
        task: a key of :data:`REDERIVERS`.
        prompt: the item's question (``TaskItem.prompt``), from which the true values are computed.
        text: the decoded response (special tokens skipped).
        finished: False when the response was cut at the length cap (its last number is not judged).

    Raises:
        ValueError: no re-deriver for ``task``, or ``prompt`` is not one of that task's questions.
    """
    if task not in REDERIVERS:
        raise ValueError(f"no re-deriver for task {task!r}; tasks with one: {', '.join(sorted(REDERIVERS))} "
                         "(add one with grpolab.diagnostics.rederive.register_rederiver)")
    return REDERIVERS[task](prompt, text, finished)


def _wrong_char(start: int, written: str, expected: str) -> int:
    """Index of the first character of ``written`` (at ``start``) that differs from ``expected``."""
    for i, (w, e) in enumerate(zip(written, expected)):
        if w != e:
            return start + i
    return start + min(len(written), len(expected)) - (1 if len(written) <= len(expected) else 0)


class _Claims:
    """Running count of checked claims and the first error."""

    def __init__(self, text: str, finished: bool) -> None:
        self.text, self.finished, self.n = text, finished, 0

    def judgeable(self, end: int) -> bool:
        """A number ending at ``end`` is complete unless it touches the end of a cut response."""
        return self.finished or end < len(self.text)

    def check(self, kind: str, start: int, written: str, expected: int | str) -> Rederivation | None:
        self.n += 1
        exp = str(expected)
        if written == exp:
            return None
        return Rederivation(_wrong_char(start, written, exp), kind, written, exp, self.n, None, False)

    def done(self, final: str | None, truth: int) -> Rederivation:
        return Rederivation(None, None, None, None, self.n, final, final is not None and final == str(truth))


# --- short_arith ----------------------------------------------------------------------------------

_QUESTION = re.compile(r"(\d+)\s*([+-])\s*(\d+)")
_EQUATION = re.compile(r"(\d+(?:\s*[+-]\s*\d+)+)\s*(?:(=)|:\s*borrow\s+10\s*,)\s*(\d+)", re.I)
_OPERAND = re.compile(r"([+-]?)\s*(\d+)")
_WORD = re.compile(r"\b(write|carry)\s+(?:a\s+|the\s+)?(\d+)", re.I)
_SO = re.compile(r"\bso\W*$", re.I)
_RHS_EXPR = re.compile(r"(?:\s*[+-]\s*\d+)+")


def _columns(a: int, op: str, b: int) -> tuple[list[int], list[int], int]:
    """The digits (least significant first) of the longer and the shorter operand, and the
    number of digits of the shorter: the columns :func:`~grpolab.tasks.short_arith.worked_solution` works."""
    top, bottom = (a, b) if op == "-" or a >= b else (b, a)
    width = len(str(top))
    return ([(top // 10**i) % 10 for i in range(width)], [(bottom // 10**i) % 10 for i in range(width)],
            len(str(bottom)))


def _operands(expr: str, offset: int) -> list[tuple[str, int, int]]:
    """``[(op, value, start)]`` of an expression ``"7 + 8 + 1"`` (the first op is ``""``)."""
    return [(m.group(1), int(m.group(2)), offset + m.start(2)) for m in _OPERAND.finditer(expr)]


def _column_check(c: _Claims, ops, op: str, want: list[int], result: tuple[str, int]) -> Rederivation | None:
    """A column step's operands against the column's ``want`` = [digit, digit?, carry?]."""
    got = [v for _, v, _ in ops]
    orders = [want] + ([[want[1], want[0]] + want[2:]] if op == "+" and len(want) >= 2 else [])
    if any(got == w for w in orders) and all(o in ("", op) for o, _, _ in ops):
        c.n += 1
        return None
    best = max(orders, key=lambda w: next((i for i, (g, x) in enumerate(zip(got, w)) if g != x), min(len(got), len(w))))
    for i, (o, v, s) in enumerate(ops):
        if i >= len(best):
            return c.check("column", s, str(v), "")  # an operand the column does not have
        if v != best[i] or o not in ("", op):
            return c.check("column", s, str(v), best[i] if o in ("", op) else f"{op}{v}")
    # every written operand is right but one is missing (a forgotten carry): the value is wrong
    value = sum(best) if op == "+" else best[0] - sum(best[1:])
    return c.check("column", result[1], result[0], value if value >= 0 else value + 10)


_ANSWER_LINE = re.compile(r"^\W*(?:(?:the\s+)?(?:final\s+)?answer\b[^\d]*|.*\d\s*[+-]\s*\d+\s*=\s*)?(\d+)\W*$", re.I)


def _final_number(text: str) -> tuple[int, str] | None:
    """``(start, digits)`` of the final answer: the number a last line states as the answer
    (``"55"``, ``"Answer: 55"``, ``"The final answer is: 55."``, ``"47 + 8 = 55"``); None when the
    last line states none (prose, or ``"37 = 37"``)."""
    body = text.rstrip()
    last_nl = body.rfind("\n")
    m = _ANSWER_LINE.match(body[last_nl + 1:])
    return None if m is None else (last_nl + 1 + m.start(1), m.group(1))


def _summary_check(c: _Claims, ops, q: tuple[int, str, int]) -> Rederivation | None:
    """"So A + B = N": the operands must be the question's (either order for a sum)."""
    a, op, b = q
    got = [(o or "+", v) for o, v, _ in ops]
    want = [("+", a), (op, b)]
    if (sorted(got) == sorted(want)) if op == "+" else got == want:
        c.n += 1
        return None
    if op == "+" and len(got) == 2 and got[1] == want[0]:
        want = [want[1], want[0]]  # "8 + 46": compare in the order written
    for i, (o, v, s) in enumerate(ops):
        if i >= len(want):
            return c.check("summary", s, str(v), "")
        if (o or "+", v) != want[i]:
            return c.check("summary", s, str(v), want[i][1] if (o or "+") == want[i][0] else f"{want[i][0]}{v}")
    return c.check("summary", ops[-1][2], str(ops[-1][1]), f"{ops[-1][1]} {op} {b}")


def _equation(c: _Claims, m: re.Match, q: tuple[int, str, int], state: dict) -> Rederivation | None:
    """Check one equation match of a short_arith response; updates the column ``state``."""
    op = q[1]
    ops = _operands(m.group(1), m.start(1))
    borrow = m.group(2) is None
    value = sum(v if o != "-" else -v for o, v, _ in ops)
    res = (m.group(3), m.start(3))
    if _SO.search(c.text[max(0, m.start() - 8):m.start()]):  # "So 47 + 8 = 55": the question restated
        bad = _summary_check(c, ops, q)
        if bad is not None:
            return bad
    elif all(v < 10 for _, v, _ in ops) and state["col"] < len(state["top"]):
        i = state["col"]
        want = [state["top"][i]] + ([state["bottom"][i]] if i < state["n_bottom"] else []) \
            + ([state["carry"]] if state["carry"] else [])
        bad = _column_check(c, ops, op, want, res)
        if bad is not None:
            return bad
        state["col"] += 1
        state["last"] = value + 10 if borrow else value
        state["carry"] = (1 if borrow or value < 0 else 0) if op == "-" else value // 10
    if not c.judgeable(m.end(3)):
        return None
    rhs = _RHS_EXPR.match(c.text, m.end(3))
    if rhs is not None and not borrow:  # "1 + 78 = 78 + 1": an expression on the right, equal in value or not
        right = _operands(m.group(3) + rhs.group(0), m.start(3))
        if sum(v if o != "-" else -v for o, v, _ in right) == value:
            c.n += 1
            return None
        return c.check("equation", res[1], res[0], f"{value} (the left side's value)")
    if borrow:
        return c.check("equation", res[1], res[0], value + 10 if value < 0 else "no borrow")
    return c.check("equation", res[1], res[0], value)


@register_rederiver("short_arith")
def rederive_short_arith(prompt: str, text: str, finished: bool = True) -> Rederivation:
    """Re-derive a worked answer to ``"What is A + B?"`` (module docstring)."""
    qm = _QUESTION.search(prompt)
    if qm is None:
        raise ValueError(f"short_arith re-deriver: no 'A + B' or 'A - B' in the prompt {prompt!r}")
    a, op, b = int(qm.group(1)), qm.group(2), int(qm.group(3))
    truth = a + b if op == "+" else a - b
    top, bottom, n_bottom = _columns(a, op, b)
    state = {"col": 0, "carry": 0, "last": None, "top": top, "bottom": bottom, "n_bottom": n_bottom}
    c = _Claims(text, finished)
    events = [(m.start(), "eq", m) for m in _EQUATION.finditer(text)]
    events += [(m.start(), "word", m) for m in _WORD.finditer(text)]
    for _, kind, m in sorted(events, key=lambda e: e[0]):
        if kind == "eq":
            bad = _equation(c, m, (a, op, b), state)
        elif state["last"] is None or not c.judgeable(m.end(2)):
            continue  # a "write"/"carry" before any column step refers to nothing checkable
        elif m.group(1).lower() == "write":
            bad = c.check("write", m.start(2), m.group(2), state["last"] % 10)
        else:
            bad = c.check("carry", m.start(2), m.group(2), state["carry"])
        if bad is not None:
            return bad
    fin = _final_number(text) if finished else None  # a cut response has no final line
    if fin is None:
        return c.done(None, truth)
    bad = c.check("final", fin[0], fin[1], truth)
    return bad if bad is not None else c.done(fin[1], truth)


# --- arith ----------------------------------------------------------------------------------------

_STEP = re.compile(r"(\d+)([+-])(\d+)=(\d+)")


@register_rederiver("arith")
def rederive_arith(prompt: str, text: str, finished: bool = True) -> Rederivation:
    """Re-derive an arith scratchpad ``"7+5=12;12-3=9#9"`` for ``prompt`` ``"7+5-3="`` (module docstring)."""
    terms = re.findall(r"([+-]?)(\d+)", prompt.rstrip("= "))
    if not terms or terms[0][0]:
        raise ValueError(f"arith re-deriver: the prompt {prompt!r} is not a chain like '7+5-3='")
    first, steps = int(terms[0][1]), [(o, int(v)) for o, v in terms[1:]]
    truth = first + sum(v if o == "+" else -v for o, v in steps)
    c = _Claims(text, finished)
    head, hash_, tail = text.partition("#")
    total = first
    for k, m in enumerate(_STEP.finditer(head)):
        if k >= len(steps):
            return c.check("step", m.start(1), m.group(1), "")  # a step the problem does not have
        o, v = steps[k]
        if bad := c.check("step", m.start(1), m.group(1), total):  # the running total
            return bad
        if m.group(2) != o:  # the prompt's operator: point at the operand it applies to
            return c.check("step", m.start(3), m.group(3), f"{o}{v}")
        if bad := c.check("step", m.start(3), m.group(3), v):  # the prompt's operand
            return bad
        if not c.judgeable(m.end(4)):
            return c.done(None, truth)
        x, y = int(m.group(1)), int(m.group(3))
        if bad := c.check("equation", m.start(4), m.group(4), x + y if o == "+" else x - y):
            return bad
        total = int(m.group(4))
    fm = re.match(r"\d+", tail) if hash_ and finished else None
    if fm is None:
        return c.done(None, truth)
    start = len(head) + 1
    bad = c.check("final", start, fm.group(), truth)
    return bad if bad is not None else c.done(fm.group(), truth)
