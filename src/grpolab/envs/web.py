"""A text web-agent environment in the style of MiniWoB's text track: the "web" environment.

Each episode shows a small page as an accessibility-tree-like list of elements with ids, under
an instruction (the prompt; all lower case, the tiny tokenizer has no capitals)::

    task: type alice into the username field and press login
    [1] input username
    [2] input password
    [3] button login
    [4] link help

Actions (one per model turn; see :mod:`grpolab.envs.base` for the turn format):

* ``click(ID)`` -- press a button or link, or toggle a checkbox;
* ``type(ID,"TEXT")`` -- set an input's text (replaces what was there);
* ``done()`` -- end the episode; the reward is 1.0 if the page state meets the task, else 0.0.

After every action except ``done()`` the observation is a one-line account of what happened:
``=[3] clicked``, ``=[4] checked`` / ``=[4] unchecked``, ``=[1] username: alice``, or
``=error: ...`` for an invalid action (unparsable text, an unknown id, typing into a button,
clicking an input); the episode goes on after an error.

Success (checked at ``done()``), by task family (``item.meta["family"]``):

* ``click`` -- exactly the target button/link was clicked (once or more), nothing else;
* ``type`` -- every input holds its goal text (other inputs empty) and nothing was clicked;
* ``login`` -- inputs hold their goal texts, the only click is the login button, and it came
  after the last ``type``;
* ``checkboxes`` -- exactly the boxes labelled with a fruit are checked, nothing was clicked.

The page and goal live in ``item.meta`` (``elements``: list of ``{"id", "kind", "label"}``;
``goal``: ``{"click": [ids], "values": {id: text}, "checked": [ids]}``), produced by
:class:`grpolab.tasks.web.WebTask`, which also runs :func:`web_expert` to record demonstrations.
"""

from __future__ import annotations

import re
from typing import Any

from grpolab.envs.base import StepResult, format_observation, parse_call, register_env

__all__ = ["WebEnv", "render_page", "web_expert"]

KINDS = ("button", "link", "input", "checkbox")
_TYPE_ARGS = re.compile(r'\s*(\d+)\s*,\s*"([^"]*)"\s*', re.DOTALL)
_ID_ARG = re.compile(r"\s*(\d+)\s*")


def render_page(instruction: str, elements: list[dict]) -> str:
    """The prompt: ``"task: <instruction>\\n"`` then one ``"[id] kind label\\n"`` line per element."""
    lines = [f"task: {instruction}"] + [f"[{e['id']}] {e['kind']} {e['label']}" for e in elements]
    return "\n".join(lines) + "\n"


def web_expert(item: Any) -> list[str]:
    """The scripted expert's actions for ``item`` (it reads the goal from ``item.meta``)."""
    goal = item.meta["goal"]
    actions = [f'type({i},"{text}")' for i, text in goal.get("values", {}).items()]
    actions += [f"click({i})" for i in goal.get("checked", [])]
    actions += [f"click({i})" for i in goal.get("click", [])]
    return actions + ["done()"]


@register_env("web")
class WebEnv:
    """The text web page environment (see the module docstring)."""

    def __init__(self) -> None:
        self._item: Any = None

    def reset(self, item: Any) -> str:
        meta = item.meta
        if "elements" not in meta or "goal" not in meta:
            raise ValueError("a web item needs meta['elements'] and meta['goal'] (see grpolab.tasks.web)")
        self._item = item
        self.elements = {int(e["id"]): e for e in meta["elements"]}
        self.values: dict[int, str] = {}
        self.checked: set[int] = set()
        self.events: list[tuple] = []  # ("type", id) / ("click", id) in order
        return item.prompt

    def _error(self, text: str) -> StepResult:
        return StepResult(format_observation("error: " + text), info={"invalid": True})

    def step(self, action: str) -> StepResult:
        if self._item is None:
            raise RuntimeError("call reset(item) before step()")
        call = parse_call(action)
        if call is None:
            return self._error("bad action")
        name, arg = call
        if name == "done":
            if arg.strip():
                return self._error("bad action")
            ok = self.success()
            return StepResult("", reward=1.0 if ok else 0.0, done=True, info={"success": ok})
        if name == "click":
            m = _ID_ARG.fullmatch(arg)
            if m is None:
                return self._error("bad id")
            i = int(m.group(1))
            el = self.elements.get(i)
            if el is None:
                return self._error(f"no element {i}")
            if el["kind"] == "input":
                return self._error(f"[{i}] is an input")
            if el["kind"] == "checkbox":
                self.checked ^= {i}
                self.events.append(("toggle", i))
                return StepResult(format_observation(f"[{i}] {'checked' if i in self.checked else 'unchecked'}"))
            self.events.append(("click", i))
            return StepResult(format_observation(f"[{i}] clicked"))
        if name == "type":
            m = _TYPE_ARGS.fullmatch(arg)
            if m is None:
                return self._error("bad action")
            i, text = int(m.group(1)), m.group(2)
            el = self.elements.get(i)
            if el is None:
                return self._error(f"no element {i}")
            if el["kind"] != "input":
                return self._error(f"[{i}] is not an input")
            self.values[i] = text
            self.events.append(("type", i))
            return StepResult(format_observation(f"[{i}] {el['label']}: {text}"))
        return self._error("bad action")

    def success(self) -> bool:
        """Whether the current page state meets the item's goal (see the module docstring)."""
        goal = self._item.meta["goal"]
        want_values = {int(k): v for k, v in goal.get("values", {}).items()}
        want_clicks = [int(i) for i in goal.get("click", [])]
        want_checked = {int(i) for i in goal.get("checked", [])}
        values = {i: v for i, v in self.values.items() if v != ""}
        if values != want_values or self.checked != want_checked:
            return False
        clicks = [i for kind, i in self.events if kind == "click"]
        if set(clicks) != set(want_clicks):
            return False
        if want_clicks and want_values:  # the button press must come after the typing
            last_type = max(k for k, (kind, _) in enumerate(self.events) if kind == "type")
            last_click = max(k for k, (kind, _) in enumerate(self.events) if kind == "click")
            if last_click < last_type:
                return False
        return True
