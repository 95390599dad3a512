"""The "short_code" task: write a short Python function from a one-line description.

Made for small instruct models (docs/tasks.md, "short_code"). One item::

    prompt:         "Write a Python function `count_letter(s)` that returns how many times the
                     letter 'a' appears in the string s.\\nReply with the function only, in a
                     ```python code block."
    reference:      the hidden tests, a JSON list of ``assert`` lines
                    ('["assert count_letter(\\"banana\\") == 3", ...]'), five per item
    reward:         "code" (:mod:`grpolab.rewards.code`): the program runs in the sandbox, the
                    score is the fraction of hidden tests passed
    demonstration:  the reference solution in a ```python block
    privileged:     the reference solution (option ``privileged``: "solution" is the only choice;
                    the tests are never privileged context)
    meta:           {"difficulty": level, "family": template, "function": name, "solution": ...}

Levels (option ``levels``): 1 = one operation (arithmetic, a string or list method), 2 = a
loop with a condition, 3 = a few steps (counting into a dict, rotating, pairs, FizzBuzz).

Every template has two implementations written independently: the reference *source* shown to
the model (and run in the sandbox by the tests in tests/tasks/) and a Python function here that
computes the hidden tests' expected values. A test's inputs are drawn from a generator seeded by
the prompt, so an item is the same in every process whatever the task's seed; the seed only
orders the splits (:mod:`grpolab.tasks.catalog`).
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass
from typing import Any, Callable

from grpolab.tasks.base import TaskItem, register_task
from grpolab.tasks.catalog import CatalogTask, Spec, check_levels, check_privileged

__all__ = ["LEVELS", "ShortCodeTask", "TEMPLATES"]

LEVELS = (1, 2, 3)
#: Tests per item.
N_TESTS = 5
_LETTERS = string.ascii_lowercase
_WORDS = ("apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "green", "house", "maple",
          "ocean", "pixel", "sugar", "train", "zebra", "candle", "forest", "guitar", "yellow", "window",
          "bread", "chair", "dance", "eagle", "flame", "grape", "honey", "ivory", "jelly", "kite")
_SEPS = ("-", "_", ",", "+", ":", ";", "/", "|", ".", "*", "#", "=", "~", "!", "?", "&", " - ", ", ",
         "::", "->")
_FIZZ = (("Fizz", "Buzz"), ("Ping", "Pong"), ("Foo", "Bar"), ("Tick", "Tock"))


@dataclass(frozen=True)
class Template:
    """One kind of function.

    Attributes:
        family: the template's id (``meta["family"]``).
        level: its difficulty level.
        fn: the function's name; ``arg``: its one argument ("n" an int >= 0, "s" a string of
            lowercase words separated by single spaces, "xs" a list of ints).
        desc: the description's format string (``{k}``, ``{c}``... from the parameters).
        source: the reference solution's format string (literal braces doubled).
        params: every parameter dict the template takes.
        impl: ``impl(params, x)`` -> the expected value (independent of ``source``).
        hits: ``hits(params, rng)`` -> extra inputs that exercise the template's case (e.g. a
            string holding the letter asked about), or None.
    """

    family: str
    level: int
    fn: str
    arg: str
    desc: str
    source: str
    params: tuple
    impl: Callable[[dict, Any], Any]
    hits: Callable[[dict, random.Random], list] | None = None


def _grid(**axes) -> tuple:
    """Every combination of the axes' values, as dicts (the first axis varies slowest)."""
    out = [{}]
    for key, values in axes.items():
        out = [{**d, key: v} for d in out for v in values]
    return tuple(out)


def _pairs_of_letters() -> tuple:
    return tuple({"c": c, "d": d} for c in _LETTERS for d in _LETTERS if c != d)


def _with_letter(p: dict, rng: random.Random) -> list:
    c = p["c"]
    return [f"{rng.choice(_WORDS)}{c} {c}{rng.choice(_WORDS)}", f"{c}{c} {rng.choice(_WORDS)}"]


def _fizz(p: dict, n: int) -> list:
    out = []
    for i in range(1, n + 1):
        word = (p["w1"] if i % p["a"] == 0 else "") + (p["w2"] if i % p["b"] == 0 else "")
        out.append(word or str(i))
    return out


def _kth(p: dict, xs: list):
    distinct = sorted(set(xs))
    return distinct[p["k"] - 1] if len(distinct) >= p["k"] else None


def _window(p: dict, xs: list):
    k = p["k"]
    return max((sum(xs[i:i + k]) for i in range(len(xs) - k + 1)), default=None)


def _caesar(p: dict, s: str) -> str:
    shift = p["k"] if p["way"] == "forward" else -p["k"]
    return "".join(_LETTERS[(_LETTERS.index(ch) + shift) % 26] if ch in _LETTERS else ch for ch in s)


def _level1() -> list[Template]:
    return [
        Template("scale", 1, "scale", "n", "returns n times {k} plus {m}",
                 "def scale(n):\n    return n * {k} + {m}\n", _grid(k=range(2, 13), m=range(1, 31)),
                 lambda p, n: sum([n] * p["k"]) + p["m"]),
        Template("count_letter", 1, "count_letter", "s", "returns how many times the letter '{c}' appears in the string s",
                 "def count_letter(s):\n    total = 0\n    for ch in s:\n        if ch == '{c}':\n            total += 1\n"
                 "    return total\n", _grid(c=_LETTERS), lambda p, s: s.count(p["c"]), _with_letter),
        Template("replace_letter", 1, "replace_letter", "s", "returns the string s with every '{c}' replaced by '{d}'",
                 "def replace_letter(s):\n    return ''.join('{d}' if ch == '{c}' else ch for ch in s)\n",
                 _pairs_of_letters(), lambda p, s: s.replace(p["c"], p["d"]), _with_letter),
        Template("divisible", 1, "divisible", "n", "returns True if n is divisible by {k}, otherwise False",
                 "def divisible(n):\n    return n % {k} == 0\n", _grid(k=range(2, 100)),
                 lambda p, n: (n // p["k"]) * p["k"] == n, lambda p, rng: [p["k"] * rng.randint(1, 9)]),
        Template("add_each", 1, "add_each", "xs", "returns a new list with {k} added to every element of the list xs",
                 "def add_each(xs):\n    return [x + {k} for x in xs]\n", _grid(k=range(1, 100)),
                 lambda p, xs: list(map(lambda v: v + p["k"], xs))),
        Template("first_chars", 1, "first_chars", "s", "returns the first {k} characters of the string s "
                 "(all of it if it is shorter)", "def first_chars(s):\n    return s[:{k}]\n", _grid(k=range(1, 13)),
                 lambda p, s: "".join(ch for i, ch in enumerate(s) if i < p["k"])),
        Template("last_items", 1, "last_items", "xs", "returns the last {k} elements of the list xs "
                 "(all of them if it has fewer)", "def last_items(xs):\n    return xs[-{k}:]\n", _grid(k=range(1, 13)),
                 lambda p, xs: xs[max(0, len(xs) - p["k"]):]),
        Template("repeat", 1, "repeat", "s", "returns the string s repeated {k} times",
                 "def repeat(s):\n    return s * {k}\n", _grid(k=range(2, 13)),
                 lambda p, s: "".join([s] * p["k"])),
        Template("remainder", 1, "remainder", "n", "returns the remainder of n divided by {k}",
                 "def remainder(n):\n    return n % {k}\n", _grid(k=range(2, 100)),
                 lambda p, n: n - (n // p["k"]) * p["k"]),
        Template("add_suffix", 1, "add_suffix", "s", "returns the string s followed by '{w}'",
                 "def add_suffix(s):\n    return s + '{w}'\n", _grid(w=_WORDS), lambda p, s: f"{s}{p['w']}"),
    ]


def _level2() -> list[Template]:
    return [
        Template("sum_greater", 2, "sum_greater", "xs", "returns the sum of the elements of the list xs that are "
                 "greater than {k}", "def sum_greater(xs):\n    total = 0\n    for x in xs:\n        if x > {k}:\n"
                 "            total += x\n    return total\n", _grid(k=range(-50, 101)),
                 lambda p, xs: sum(filter(lambda v: v > p["k"], xs))),
        Template("long_words", 2, "long_words", "s", "returns the number of words in the string s that have more "
                 "than {k} letters", "def long_words(s):\n    return sum(1 for w in s.split() if len(w) > {k})\n",
                 _grid(k=range(1, 9)), lambda p, s: len([w for w in s.split(" ") if w and len(w) > p["k"]])),
        Template("even_times", 2, "even_times", "xs", "returns a list of the even numbers of the list xs, each "
                 "multiplied by {k}, in their original order",
                 "def even_times(xs):\n    return [x * {k} for x in xs if x % 2 == 0]\n", _grid(k=range(2, 100)),
                 lambda p, xs: [v * p["k"] for v in xs if not v & 1]),
        Template("join_reversed", 2, "join_reversed", "s", "returns the words of the string s in reverse order, "
                 "joined by '{sep}'", "def join_reversed(s):\n    return '{sep}'.join(reversed(s.split()))\n",
                 _grid(sep=_SEPS), lambda p, s: p["sep"].join(s.split()[::-1])),
        Template("digit_sum", 2, "digit_sum", "n", "returns the sum of the decimal digits of n, multiplied by {k}",
                 "def digit_sum(n):\n    total = 0\n    while n > 0:\n        total += n % 10\n        n //= 10\n"
                 "    return total * {k}\n", _grid(k=range(2, 100)),
                 lambda p, n: sum(int(d) for d in str(n)) * p["k"]),
        Template("words_starting", 2, "words_starting", "s", "returns a list of the words of the string s that "
                 "start with the letter '{c}', in order",
                 "def words_starting(s):\n    return [w for w in s.split() if w.startswith('{c}')]\n",
                 _grid(c=_LETTERS), lambda p, s: [w for w in s.split(" ") if w[:1] == p["c"]],
                 lambda p, rng: [f"{p['c']}{rng.choice(_WORDS)} {rng.choice(_WORDS)} {p['c']}x"]),
        Template("multiples", 2, "multiples", "n", "returns a list of the numbers from 1 to n (inclusive) that are "
                 "divisible by {k}", "def multiples(n):\n    return [i for i in range(1, n + 1) if i % {k} == 0]\n",
                 _grid(k=range(2, 100)), lambda p, n: list(range(p["k"], n + 1, p["k"]))),
        Template("count_between", 2, "count_between", "xs", "returns how many elements of the list xs are between "
                 "{a} and {b}, both included",
                 "def count_between(xs):\n    return len([x for x in xs if {a} <= x <= {b}])\n",
                 tuple({"a": a, "b": a + w} for a in range(-10, 21) for w in range(2, 12)),
                 lambda p, xs: sum(1 for v in xs if not (v < p["a"] or v > p["b"]))),
        Template("max_plus", 2, "max_plus", "xs", "returns the largest element of the list xs plus {k}, or None "
                 "if the list is empty", "def max_plus(xs):\n    if not xs:\n        return None\n"
                 "    return max(xs) + {k}\n", _grid(k=range(1, 100)),
                 lambda p, xs: (sorted(xs)[-1] + p["k"]) if xs else None),
        Template("clip", 2, "clip", "xs", "returns the list xs with every element larger than {k} replaced by {k}",
                 "def clip(xs):\n    return [min(x, {k}) for x in xs]\n", _grid(k=range(0, 100)),
                 lambda p, xs: [p["k"] if v > p["k"] else v for v in xs]),
        Template("index_of", 2, "index_of", "s", "returns the index of the first '{c}' in the string s, or -1 if "
                 "there is none", "def index_of(s):\n    return s.find('{c}')\n", _grid(c=_LETTERS),
                 lambda p, s: next((i for i, ch in enumerate(s) if ch == p["c"]), -1), _with_letter),
    ]


def _level3() -> list[Template]:
    return [
        Template("fizzbuzz", 3, "fizzbuzz", "n", "returns a list of strings for the numbers 1 to n: '{w1}' for "
                 "multiples of {a}, '{w2}' for multiples of {b}, '{w1}{w2}' for multiples of both, otherwise the "
                 "number itself as a string",
                 "def fizzbuzz(n):\n    out = []\n    for i in range(1, n + 1):\n        word = ''\n"
                 "        if i % {a} == 0:\n            word += '{w1}'\n        if i % {b} == 0:\n"
                 "            word += '{w2}'\n        out.append(word or str(i))\n    return out\n",
                 tuple({"a": a, "b": b, "w1": w1, "w2": w2} for a in range(2, 10) for b in range(2, 10) if a != b
                       for w1, w2 in _FIZZ), _fizz),
        Template("letter_counts", 3, "letter_counts", "s", "returns a dict mapping each letter that appears at least "
                 "{k} times in the string s to its count (spaces are not letters)",
                 "def letter_counts(s):\n    counts = {{}}\n    for ch in s:\n        if ch != ' ':\n"
                 "            counts[ch] = counts.get(ch, 0) + 1\n"
                 "    return {{ch: c for ch, c in counts.items() if c >= {k}}}\n", _grid(k=range(1, 7)),
                 lambda p, s: {ch: s.count(ch) for ch in sorted(set(s) - {" "}) if s.count(ch) >= p["k"]}),
        Template("running_mod", 3, "running_mod", "xs", "returns the running totals of the list xs, each taken "
                 "modulo {k} with Python's % operator",
                 "def running_mod(xs):\n    out = []\n    total = 0\n    for x in xs:\n        total += x\n"
                 "        out.append(total % {k})\n    return out\n", _grid(k=range(2, 100)),
                 lambda p, xs: [sum(xs[:i + 1]) % p["k"] for i in range(len(xs))]),
        Template("kth_smallest", 3, "kth_smallest", "xs", "returns the {k}-th smallest distinct element of the list xs "
                 "(1 means the smallest), or None if it has fewer than {k} distinct elements",
                 "def kth_smallest(xs):\n    values = sorted(set(xs))\n    if len(values) < {k}:\n        return None\n"
                 "    return values[{k} - 1]\n", _grid(k=range(1, 7)), _kth),
        Template("rotate", 3, "rotate", "xs", "returns the list xs rotated {way} by {k} positions, wrapping around "
                 "(an empty list stays empty)",
                 "def rotate(xs):\n    if not xs:\n        return []\n    k = {shift} % len(xs)\n"
                 "    return xs[k:] + xs[:k]\n",
                 tuple({"way": w, "k": k, "shift": k if w == "left" else -k} for w in ("left", "right")
                       for k in range(1, 31)),
                 lambda p, xs: [xs[(i + p["shift"]) % len(xs)] for i in range(len(xs))]),
        Template("pair_count", 3, "pair_count", "xs", "returns the number of pairs of positions i < j such that "
                 "xs[i] + xs[j] equals {k}",
                 "def pair_count(xs):\n    count = 0\n    for i in range(len(xs)):\n"
                 "        for j in range(i + 1, len(xs)):\n            if xs[i] + xs[j] == {k}:\n"
                 "                count += 1\n    return count\n", _grid(k=range(-10, 61)),
                 lambda p, xs: sum(1 for i, a in enumerate(xs) for b in xs[i + 1:] if a + b == p["k"])),
        Template("positions", 3, "positions", "s", "returns a list of the {base}-based positions of every '{c}' "
                 "in the string s",
                 "def positions(s):\n    return [i + {base} for i, ch in enumerate(s) if ch == '{c}']\n",
                 _grid(c=_LETTERS, base=(0, 1)),
                 lambda p, s: [i + p["base"] for i in range(len(s)) if s[i] == p["c"]], _with_letter),
        Template("caesar", 3, "caesar", "s", "returns the string s with every lowercase letter shifted {k} places "
                 "{way} in the alphabet, wrapping around between z and a (other characters stay the same)",
                 "def caesar(s):\n    out = ''\n    for ch in s:\n        if 'a' <= ch <= 'z':\n"
                 "            ch = chr((ord(ch) - ord('a') + {shift}) % 26 + ord('a'))\n        out += ch\n"
                 "    return out\n",
                 tuple({"k": k, "way": w, "shift": k if w == "forward" else -k} for w in ("forward", "backward")
                       for k in range(1, 26)), _caesar),
        Template("acronym", 3, "acronym", "s", "returns the first letters of the words of the string s, in upper "
                 "case, joined by '{sep}'",
                 "def acronym(s):\n    return '{sep}'.join(w[0].upper() for w in s.split())\n", _grid(sep=_SEPS),
                 lambda p, s: p["sep"].join(w[:1].upper() for w in s.split(" ") if w)),
        Template("top_sum", 3, "top_sum", "xs", "returns the sum of the {k} largest elements of the list xs (all "
                 "of them if it has fewer)", "def top_sum(xs):\n    return sum(sorted(xs, reverse=True)[:{k}])\n",
                 _grid(k=range(1, 11)), lambda p, xs: sum(sorted(xs)[max(0, len(xs) - p["k"]):])),
        Template("window_max", 3, "window_max", "xs", "returns the largest sum of {k} consecutive elements of the "
                 "list xs, or None if it has fewer than {k} elements",
                 "def window_max(xs):\n    if len(xs) < {k}:\n        return None\n"
                 "    return max(sum(xs[i:i + {k}]) for i in range(len(xs) - {k} + 1))\n", _grid(k=range(1, 7)),
                 _window),
        Template("chunks", 3, "chunks", "xs", "returns the list xs split into consecutive chunks of {k} elements "
                 "(the last chunk may be shorter)",
                 "def chunks(xs):\n    return [xs[i:i + {k}] for i in range(0, len(xs), {k})]\n", _grid(k=range(1, 9)),
                 lambda p, xs: [list(xs[i * p["k"]:(i + 1) * p["k"]]) for i in range(-(-len(xs) // p["k"]))]),
    ]


#: Every template, by level.
TEMPLATES: dict[int, list[Template]] = {1: _level1(), 2: _level2(), 3: _level3()}


def _inputs(t: Template, p: dict, rng: random.Random) -> list:
    """:data:`N_TESTS` distinct inputs for one item: edge cases, random ones and the template's hits."""
    if t.arg == "n":
        top = 30 if t.family == "fizzbuzz" else 999
        base = [0, 1, rng.randint(2, 30), rng.randint(2, top), rng.randint(2, top)]
    elif t.arg == "s":
        base = [""] + [" ".join(rng.choice(_WORDS) for _ in range(k)) for k in (1, 2, 3, 4)]
    else:
        base = [[], [rng.randint(-10, 40)]] + [[rng.randint(-10, 40) for _ in range(k)] for k in (4, 6, 8)]
    extra = t.hits(p, rng) if t.hits else []
    out: list = []
    for x in extra + base:
        if x not in out:
            out.append(x)
    return out[:N_TESTS]


@register_task("short_code")
class ShortCodeTask(CatalogTask):
    """Write a short Python function from a one-line description (see the module docstring).

    Args:
        levels: a level or a list of levels from (1, 2, 3) (default ``[1]``).
        privileged: "solution" (the reference solution; the only choice: the code family has no
            documents).
        timeout_s: the code verifier's time limit per program (seconds).
        seed, eval_fraction: see :class:`grpolab.tasks.catalog.CatalogTask` (``eval_fraction``
            defaults to 0.5: every level holds over 400 prompts, so over 200 held out).
    """

    name = "short_code"

    def __init__(self, *, levels=(1,), privileged: str = "solution", timeout_s: float = 5.0, seed: int = 0,
                 eval_fraction: float = 0.5) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        self.levels = check_levels("short_code", list(levels) if isinstance(levels, tuple) else levels, LEVELS)
        self.privileged = check_privileged("short_code", privileged, ("solution",))
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= 60:
            raise ValueError(f"short_code: timeout_s must be a number of seconds in (0, 60], got {timeout_s!r}")
        self.timeout_s = float(timeout_s)

    def catalog(self) -> list[Spec]:
        out = []
        for level in self.levels:
            for t in TEMPLATES[level]:
                for p in t.params:
                    prompt = (f"Write a Python function `{t.fn}({t.arg})` that {t.desc.format(**p)}.\n"
                              "Reply with the function only, in a ```python code block.")
                    out.append(Spec(prompt, t.family, level, {"template": t, "params": p}))
        return out

    def make_item(self, spec: Spec) -> TaskItem:
        t: Template = spec.data["template"]
        p = spec.data["params"]
        rng = random.Random(f"short_code:{spec.prompt}")
        tests = [f"assert {t.fn}({x!r}) == {t.impl(p, x)!r}" for x in _inputs(t, p, rng)]
        source = t.source.format(**p)
        solution = f"```python\n{source}```"
        return TaskItem(
            prompt=spec.prompt,
            reference=json.dumps(tests),
            privileged=solution,
            reward="code",
            reward_options={"timeout_s": self.timeout_s},
            demonstration=solution,
            meta={"difficulty": spec.level, "family": spec.family, "function": t.fn, "solution": solution},
        )
