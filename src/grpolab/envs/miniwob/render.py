"""MiniWoB++ pages as compact text, and the text actions a policy writes (pure, no browser).

A page comes from MiniWoB++'s ``core.getDOMInfo()`` as a nested dict (``tag``, ``ref``, ``text``,
``value``, ``classes``, ``focused``, ``children``); :func:`flatten_dom` turns it into a flat list
of :class:`Element` in page order, and :func:`render_observation` into text::

    Enter the username "karrie" and the password "AU" into the text fields and press login.
    [1] "Username"
    [2] text
    [3] "Password"
    [4] password
    [5] button "Login"

The first line is the task's utterance; then one line per element, ``[id] kind "text"``, with
``id`` counted 1, 2, ... in page order (not MiniWoB's own ``ref``: small ids are easier for a
small model, and they are the same for every replay of the same episode). Kinds: ``button``,
``link``, ``text`` / ``password`` / ``email`` / ... (an ``<input>``'s type), ``checkbox`` and
``radio`` (their text is the enclosing ``<label>``'s; `` checked`` is appended when checked),
``textarea``, ``select``; plain text leaves (``<span>``, ``<div>``, ...) show no kind:
``[1] "Username"``. An input that holds text shows it: ``[2] text "karrie"``. The jQuery-UI dialog's
close button (class ``ui-dialog-titlebar-close``, hidden text "Close") is written ``button "x"``,
as the utterances call it; click-link's links (``<span class="alink">``) are ``link``.
With ``elements="interactive"`` the plain text leaves are left out.

Actions (one per model turn): ``click(ID)`` and ``type(ID,"TEXT")``; :func:`parse_action` turns
them into :class:`Action` or raises :class:`ActionError` naming what is wrong. ``type`` clicks
(focuses) the element and sends the text as real keystrokes, like MiniWoB's
``FOCUS_ELEMENT_AND_TYPE_TEXT``.

Case: the tiny default tokenizer has no capital letters, but MiniWoB's utterances and typed
texts have them (login-user's passwords are case-sensitive). ``case="escape"`` writes a capital
as ``^`` + its lower-case letter (``"AU"`` -> ``"^a^u"``) everywhere in the observation, and
:func:`decode_case` turns typed text back (``type(2,"^a^u")`` types ``AU``); ``case="keep"``
leaves text as it is (for real tokenizers); ``case="lower"`` lower-cases the observation (lossy:
a case-sensitive password cannot be typed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CASES",
    "ELEMENT_MODES",
    "Action",
    "ActionError",
    "Element",
    "decode_case",
    "encode_case",
    "flatten_dom",
    "parse_action",
    "render_observation",
]

CASES = ("keep", "escape", "lower")
ELEMENT_MODES = ("visible", "interactive")
MAX_TYPE_CHARS = 64  # MiniWoB's text action limit

_INTERACTIVE = {"button", "a", "select", "textarea"}
_CONTAINER_SKIP = {"script", "style"}


@dataclass(frozen=True)
class Element:
    """One line of the rendered page.

    Attributes:
        id: 1-based position in the rendered list (what actions name).
        ref: MiniWoB's ``ref`` for the element (positive: clickable; negative: a text fragment).
        kind: ``button``, ``link``, an input type, ``checkbox``, ``radio``, ``textarea``,
            ``select``, or ``""`` for plain text.
        text: visible text (an input's value for text inputs; a checkbox's label).
        checked: for checkboxes and radio buttons.
        focused: the element has the keyboard focus.
    """

    id: int
    ref: int
    kind: str
    text: str
    checked: bool = False
    focused: bool = False

    @property
    def clickable(self) -> bool:
        return self.ref > 0

    @property
    def typable(self) -> bool:
        return self.kind in ("text", "password", "email", "search", "tel", "url", "number", "textarea")


def _subtree_text(node: dict) -> str:
    if node.get("text"):
        return str(node["text"]).strip()
    parts = [_subtree_text(c) for c in node.get("children", [])]
    return " ".join(p for p in parts if p)


def _kind(node: dict) -> str | None:
    tag = str(node.get("tag", "")).lower()
    if tag.startswith("input_"):
        return tag[len("input_"):]
    if tag == "a" or "alink" in str(node.get("classes", "")).split():  # click-link's links are spans
        return "link"
    if tag in _INTERACTIVE:
        return tag
    return None


def flatten_dom(root: dict, *, elements: str = "visible") -> list[Element]:
    """The page's elements in page order (see the module docstring for what is kept).

    Args:
        root: ``core.getDOMInfo()``'s tree (``document.body``).
        elements: "visible" (interactive elements and text leaves) or "interactive".
    """
    if elements not in ELEMENT_MODES:
        raise ValueError(f"elements must be one of {ELEMENT_MODES}, got {elements!r}")
    out: list[dict[str, Any]] = []

    def add(ref: int, kind: str, text: str, checked: bool = False, focused: bool = False) -> None:
        out.append({"ref": int(ref), "kind": kind, "text": text, "checked": checked, "focused": focused})

    def walk(node: dict) -> None:
        tag = str(node.get("tag", "")).lower()
        if tag in _CONTAINER_SKIP:
            return
        kind = _kind(node)
        focused = bool(node.get("focused", False))
        if tag == "label":  # <label><input type=checkbox> text</label>: one line for the input
            inputs = [c for c in node.get("children", []) if _kind(c) in ("checkbox", "radio")]
            if len(inputs) == 1:
                box = inputs[0]
                label = " ".join(_subtree_text(c) for c in node.get("children", []) if c is not box).strip()
                add(box["ref"], _kind(box), label, checked=bool(box.get("value") is True),
                    focused=bool(box.get("focused", False)))
                return
        if kind is not None:
            if kind in ("checkbox", "radio"):
                add(node["ref"], kind, "", checked=node.get("value") is True, focused=focused)
            elif tag.startswith("input_") or tag == "textarea":
                value = node.get("value")
                add(node["ref"], kind, "" if value in (None, True, False) else str(value), focused=focused)
            else:
                text = _subtree_text(node)
                if kind == "button" and "titlebar-close" in str(node.get("classes", "")):
                    text = "x"  # jQuery-UI's dialog close button: its text ("Close") is hidden
                add(node["ref"], kind, text, focused=focused)
            return
        children = node.get("children", [])
        if not children:
            text = str(node.get("text") or "").strip()
            if text and elements == "visible":
                add(node["ref"], "", text, focused=focused)
            return
        for child in children:
            walk(child)

    walk(root)
    return [Element(id=i + 1, **e) for i, e in enumerate(out)]


def encode_case(text: str, case: str) -> str:
    """Observation text under the ``case`` rule (see the module docstring)."""
    if case == "keep":
        return text
    if case == "lower":
        return text.lower()
    if case == "escape":
        return re.sub(r"[A-Z]", lambda m: "^" + m.group(0).lower(), text)
    raise ValueError(f"case must be one of {CASES}, got {case!r}")


def decode_case(text: str, case: str) -> str:
    """Typed text back to what the page gets: ``^a`` -> ``A`` under ``case="escape"``."""
    if case == "escape":
        return re.sub(r"\^([a-z])", lambda m: m.group(1).upper(), text)
    if case in ("keep", "lower"):
        return text
    raise ValueError(f"case must be one of {CASES}, got {case!r}")


def _quote(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'


def render_element(el: Element, case: str = "keep") -> str:
    """``[id] kind "text"`` (see the module docstring)."""
    parts = [f"[{el.id}]"]
    if el.kind:
        parts.append(el.kind)
    if el.text or el.kind in ("", "button", "link"):
        parts.append(_quote(encode_case(el.text, case)))
    if el.checked:
        parts.append("checked")
    return " ".join(parts)


def render_observation(utterance: str, elements: list[Element], *, case: str = "keep") -> str:
    """The utterance, then one line per element; ends with a newline."""
    lines = [encode_case(utterance, case)] + [render_element(e, case) for e in elements]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ actions


class ActionError(ValueError):
    """An action the environment cannot carry out (the message says why)."""


@dataclass(frozen=True)
class Action:
    """A parsed action: ``kind`` "click" or "type", the element ``id``, ``text`` for "type"."""

    kind: str
    id: int
    text: str = ""

    def to_text(self, case: str = "keep") -> str:
        """The action written as a policy writes it (``text`` encoded under ``case``)."""
        if self.kind == "click":
            return f"click({self.id})"
        return f'type({self.id},{_quote(encode_case(self.text, case))})'


_CLICK = re.compile(r"\s*click\(\s*(\d+)\s*\)\s*", re.DOTALL)
_TYPE = re.compile(r'\s*type\(\s*(\d+)\s*,\s*"([^"\n]*)"\s*\)\s*', re.DOTALL)


def parse_action(text: str, elements: list[Element], *, case: str = "keep") -> Action:
    """Parse one action against the current page.

    Raises:
        ActionError: not ``click(ID)`` / ``type(ID,"TEXT")``, an id not on the page, clicking a
            text fragment that cannot be clicked, typing into an element that takes no text, or
            more than 64 characters of text.
    """
    m = _CLICK.fullmatch(text)
    if m is not None:
        act = Action("click", int(m.group(1)))
    else:
        m = _TYPE.fullmatch(text)
        if m is None:
            raise ActionError('bad action (write click(ID) or type(ID,"TEXT"))')
        act = Action("type", int(m.group(1)), decode_case(m.group(2), case))
    if not 1 <= act.id <= len(elements):
        raise ActionError(f"no element {act.id}")
    el = elements[act.id - 1]
    if not el.clickable:
        raise ActionError(f"[{act.id}] cannot be clicked")
    if act.kind == "type":
        if not el.typable:
            raise ActionError(f"[{act.id}] takes no text")
        if len(act.text) > MAX_TYPE_CHARS:
            raise ActionError(f"text longer than {MAX_TYPE_CHARS} characters")
    return act
