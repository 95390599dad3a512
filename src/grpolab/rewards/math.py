r"""The "math" and "exact" verifiers: final-answer extraction and comparison.

Extraction (:func:`extract_answer`), first rule that applies wins:

1. ``\boxed{...}`` -- the content of the last one (nested braces allowed);
2. a marker -- the text after the last ``#`` or ``answer:`` (case-insensitive), up to the end of
   that line (or the next non-empty line when the marker ends its line), minus a trailing
   period. The built-in tasks end completions with ``#<answer>``; GSM8K's ``#### 72`` also
   works (the last ``#`` wins). A marker with nothing after it extracts the empty string and
   scores 0: the marker commits to an answer, so there is no fallback to an earlier number;
3. the last number in the text (``math`` only; ``exact`` uses the whole stripped text instead).

Comparison (``math``): equal after :func:`normalize_answer` (strip, lower-case, drop ``$`` and
a trailing period, collapse spaces), else equal as numbers (:func:`parse_number`: integers,
decimals, ``3/4``, ``\frac{3}{4}``, ``1,000``, ``1e-3``; exact rational arithmetic; integers must
be equal, otherwise equal when ``|a - b| <= rel_tol * max(|a|, |b|)``, ``rel_tol=1e-9``), else --
when the extracted text is not itself a number but contains exactly one number (``x = 5``,
``5 apples``) -- that number compared the same way.

Symbolic equivalence (``symbolic=True``, default) through the optional ``math-verify`` package
(:func:`symbolic_equal`): used when the reference is not a plain number but looks mathematical
(LaTeX expressions, sets, intervals, ``x + 1``; not word answers), and for a LaTeX-looking answer against a numeric reference
(``\sqrt{4}`` vs ``2``), before the one-number-in-text rule. Plain numbers never go through it
(its 6-digit float rounding is looser than ``rel_tol``). Without the package those cases score 0
with ``info["symbolic"] = "unavailable"``; everything above still works.

Hostile input is safe: numbers longer than :data:`MAX_NUMBER_CHARS` characters or with an
exponent beyond ``±MAX_EXPONENT`` are treated as text, not parsed (no giant ints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from grpolab.rewards.base import RewardResult, register_reward

__all__ = [
    "Extraction",
    "MAX_EXPONENT",
    "MAX_NUMBER_CHARS",
    "exact_reward",
    "extract_answer",
    "extract_boxed",
    "extract_marked",
    "math_reward",
    "math_verify_available",
    "normalize_answer",
    "numbers_equal",
    "parse_number",
    "symbolic_equal",
]

#: Longest string :func:`parse_number` will read as a number.
MAX_NUMBER_CHARS = 1000
#: Largest |exponent| accepted in scientific notation.
MAX_EXPONENT = 1000

_MARKER_RE = re.compile(r"#|answer\s*:", re.IGNORECASE)
# A number: optional sign (only when not glued to a preceding word/number, so "12-3" has the
# numbers 12 and 3), digits with optional thousands commas, decimals, and an optional exponent
# or /denominator.
_NUMBER_IN_TEXT_RE = re.compile(
    r"(?<![\w.)])[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?(?:[eE][-+]?\d+|/\d+)?"
    r"|(?<![\w.)])[-+]?\.\d+(?:[eE][-+]?\d+)?"
)
_INT_RE = re.compile(r"[-+]?\d+")
_COMMA_INT_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_DECIMAL_RE = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
_FRACTION_RE = re.compile(r"([-+]?\d+)\s*/\s*(\d+)")
_LATEX_FRAC_RE = re.compile(r"([-+]?)\\[dt]?frac\s*\{\s*([-+]?\d+)\s*\}\s*\{\s*(\d+)\s*\}")


@dataclass
class Extraction:
    """An extracted final answer.

    Attributes:
        answer: the extracted text, or None when nothing could be extracted.
        method: "boxed", "marker", "last_number", "whole" or "none".
    """

    answer: str | None
    method: str


def extract_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (balanced braces), or None."""
    start = text.rfind("\\boxed")
    while start != -1:
        i = start + len("\\boxed")
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth = 0
            for j in range(i, len(text)):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[i + 1 : j].strip()
        start = text.rfind("\\boxed", 0, start)
    return None


def extract_marked(text: str) -> str | None:
    """Text after the last ``#`` / ``answer:`` marker (see module docstring), or None."""
    last = None
    for m in _MARKER_RE.finditer(text):
        last = m
    if last is None:
        return None
    rest = text[last.end() :]
    for line in rest.split("\n"):
        line = line.strip()
        if line:
            return line[:-1].rstrip() if line.endswith(".") else line
    return ""


def extract_answer(text: str, *, number_fallback: bool = True) -> Extraction:
    """Extract the final answer: boxed, then marker, then the last number (or the whole text).

    Args:
        text: the completion.
        number_fallback: True (``math``): fall back to the last number in the text. False
            (``exact``): fall back to the whole stripped text.
    """
    boxed = extract_boxed(text)
    if boxed is not None:
        return Extraction(boxed, "boxed")
    marked = extract_marked(text)
    if marked is not None:
        return Extraction(marked, "marker")
    if number_fallback:
        last = None
        for m in _NUMBER_IN_TEXT_RE.finditer(text):
            last = m
        if last is not None:
            return Extraction(last.group(0), "last_number")
        return Extraction(None, "none")
    stripped = text.strip()
    return Extraction(stripped, "whole") if stripped else Extraction(None, "none")


def normalize_answer(text: str) -> str:
    """Canonical string form: strip, lower-case, drop ``$``, trailing period, extra spaces."""
    s = text.strip().replace("$", "")
    s = s.rstrip(".").strip()
    return " ".join(s.lower().split())


def parse_number(text: str) -> Fraction | None:
    r"""Parse an integer, decimal (optionally scientific), ``a/b``, ``\frac{a}{b}`` or
    ``1,234.5`` into an exact Fraction; None when ``text`` is not (only) a number."""
    s = text.strip().replace("$", "").rstrip(".").strip()
    if not s or len(s) > MAX_NUMBER_CHARS:
        return None
    try:
        if _INT_RE.fullmatch(s):
            return Fraction(int(s))
        if _COMMA_INT_RE.fullmatch(s):
            return Fraction(s.replace(",", ""))
        if _DECIMAL_RE.fullmatch(s):
            exp = re.search(r"[eE]([-+]?\d+)$", s)
            if exp and abs(int(exp.group(1))) > MAX_EXPONENT:
                return None
            return Fraction(s)
        m = _FRACTION_RE.fullmatch(s)
        if m:
            den = int(m.group(2))
            return Fraction(int(m.group(1)), den) if den != 0 else None
        m = _LATEX_FRAC_RE.fullmatch(s)
        if m:
            den = int(m.group(3))
            if den == 0:
                return None
            value = Fraction(int(m.group(2)), den)
            return -value if m.group(1) == "-" else value
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return None


def numbers_equal(a: Fraction, b: Fraction, rel_tol: float = 1e-9) -> bool:
    """``a == b``, or -- when either is not an integer -- ``|a - b| <= rel_tol * max(|a|, |b|)``.

    Exact rational arithmetic. Two integers must be equal: a relative tolerance would otherwise
    accept 999999999 for 1000000000.
    """
    if a == b:
        return True
    if a.denominator == 1 and b.denominator == 1:
        return False
    return abs(a - b) <= Fraction(rel_tol) * max(abs(a), abs(b))


#: Longest answer / reference (characters) handed to math-verify (sympy can be slow).
MAX_SYMBOLIC_CHARS = 500
# Answers that look like LaTeX or an expression rather than a plain number.
_SYMBOLIC_HINT_RE = re.compile(r"[\\^{}()\[\]]|sqrt|pi")
# References worth handing to math-verify: digits, LaTeX, operators, brackets.
_MATHY_RE = re.compile(r"[\d\\^{}()\[\]+\-*/=<>]|sqrt|pi|infty")
_MATH_VERIFY: Any = None  # the module, False when it is not installed, None before the first try


def math_verify_available() -> bool:
    """Whether the optional ``math-verify`` package can be imported."""
    return _import_math_verify() is not False


def _import_math_verify():
    global _MATH_VERIFY
    if _MATH_VERIFY is None:
        try:
            import logging

            import math_verify

            # We disable its own signal-based timeouts (they would clash with safe_score's
            # SIGALRM); it warns about that on every call otherwise.
            logging.getLogger("math_verify").setLevel(logging.ERROR)
            _MATH_VERIFY = math_verify
        except ImportError:
            _MATH_VERIFY = False
    return _MATH_VERIFY


def symbolic_equal(answer: str, reference: str) -> bool | None:
    r"""Equivalence through math-verify (LaTeX, fractions, sets, intervals, expressions).

    Both sides are wrapped in ``$...$`` unless they already contain ``$``. Returns None when
    math-verify is not installed or either side is longer than :data:`MAX_SYMBOLIC_CHARS`.
    Its own timeouts are off; callers rely on :func:`grpolab.rewards.safe_score`'s time limit.
    """
    mv = _import_math_verify()
    if mv is False or len(answer) > MAX_SYMBOLIC_CHARS or len(reference) > MAX_SYMBOLIC_CHARS:
        return None

    def wrap(text: str) -> str:
        return text if "$" in text else f"${text}$"

    gold = mv.parse(wrap(reference), parsing_timeout=None)
    pred = mv.parse(wrap(answer), parsing_timeout=None)
    if not gold or not pred:
        return False
    return bool(mv.verify(gold, pred, timeout_seconds=None))


@register_reward("math")
def math_reward(
    completion: str, reference: str, *, rel_tol: float = 1e-9, symbolic: bool = True
) -> RewardResult:
    """1.0 when the extracted final answer equals ``reference`` as a string, a number, or
    (``symbolic=True``, math-verify installed) a mathematical object.

    Order: normalised string equality; if the reference is a plain number, exact-rational
    numeric comparison (``rel_tol``), then -- only for an answer that looks like LaTeX or an
    expression -- math-verify, then the single number inside the answer; if the reference is not
    a plain number but looks mathematical -- digits, LaTeX, operators or brackets:
    ``\\frac{\\sqrt 2}{2}``, ``\\{1, 2\\}``, ``(0, 1]``, ``x+1`` -- math-verify (word answers
    such as "Paris" do not go through it).
    Plain numbers never go through math-verify, whose float rounding (6 digits) is looser than
    ``rel_tol``.

    ``info``: ``extracted`` (str or None), ``method`` (how it was extracted) and ``match``
    ("string", "numeric", "symbolic", "numeric_in_text" or None); ``symbolic`` is
    "unavailable" when math-verify was needed but is not installed.
    """
    if not isinstance(reference, str):
        raise TypeError(
            f"the math reward needs the reference answer as a str, got {type(reference).__name__}"
        )
    ext = extract_answer(completion, number_fallback=True)
    info: dict[str, Any] = {"extracted": ext.answer, "method": ext.method, "match": None}
    if not ext.answer:
        return RewardResult(0.0, info)
    if normalize_answer(ext.answer) == normalize_answer(reference):
        info["match"] = "string"
        return RewardResult(1.0, info)

    def try_symbolic() -> bool:
        if not symbolic:
            return False
        same = symbolic_equal(ext.answer, reference)
        if same is None:
            info["symbolic"] = "unavailable" if not math_verify_available() else "too_long"
        return bool(same)

    ref_num = parse_number(reference)
    if ref_num is None:
        # Word answers ("Paris") skip math-verify (and its import and ~10 ms per call).
        if _MATHY_RE.search(reference) and try_symbolic():
            info["match"] = "symbolic"
            return RewardResult(1.0, info)
        return RewardResult(0.0, info)
    got = parse_number(ext.answer)
    if got is not None:
        if numbers_equal(got, ref_num, rel_tol):
            info["match"] = "numeric"
            return RewardResult(1.0, info)
        return RewardResult(0.0, info)
    if _SYMBOLIC_HINT_RE.search(ext.answer) and try_symbolic():
        info["match"] = "symbolic"
        return RewardResult(1.0, info)
    if len(ext.answer) <= 10 * MAX_NUMBER_CHARS:
        found = _NUMBER_IN_TEXT_RE.findall(ext.answer)
        if len(found) == 1:
            got = parse_number(found[0])
            if got is not None and numbers_equal(got, ref_num, rel_tol):
                info["match"] = "numeric_in_text"
                return RewardResult(1.0, info)
    return RewardResult(0.0, info)


@register_reward("exact")
def exact_reward(
    completion: str, reference: str, *, extract: bool = True, case_sensitive: bool = True
) -> RewardResult:
    r"""1.0 when the answer equals ``reference`` exactly after stripping surrounding whitespace.

    With ``extract=True`` (default) the answer is the ``\boxed{}`` content or the text after the
    last ``#`` / ``answer:`` marker, else the whole completion; with ``extract=False`` it is the
    whole completion. No numeric matching: ``"00183" != "183"``. An empty answer never scores.
    """
    if extract:
        ext = extract_answer(completion, number_fallback=False)
    else:
        stripped = completion.strip()
        ext = Extraction(stripped, "whole") if stripped else Extraction(None, "none")
    if not isinstance(reference, str):
        raise TypeError(
            f"the exact reward needs the reference as a str, got {type(reference).__name__}"
        )
    info = {"extracted": ext.answer, "method": ext.method}
    got = (ext.answer or "").strip()
    want = reference.strip()
    if not case_sensitive:
        got, want = got.lower(), want.lower()
    return RewardResult(1.0 if got and got == want else 0.0, info)
