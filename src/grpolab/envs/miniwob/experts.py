"""Scripted experts for the supported MiniWoB++ tasks (the warm start's demonstrations).

Each expert reads the task's fields (parsed from the utterance by ``miniwob.fields``), the page
(:class:`grpolab.envs.miniwob.render.Element` list) and the actions it took so far, and returns
the next :class:`Action` (or ``None`` when it has nothing to do). Experts decide from the page
state (an input that already holds its text is not typed into again), so they are the same
function on every step. ``tests/envs/test_miniwob.py`` checks that each solves >= 95% of 50
seeded episodes of its task in the real browser.
"""

from __future__ import annotations

from collections.abc import Callable

from grpolab.envs.miniwob.render import Action, Element

__all__ = ["EXPERTS", "SUPPORTED_TASKS", "expert_action"]

Expert = Callable[[str, dict, list[Element], list[Action]], "Action | None"]
EXPERTS: dict[str, Expert] = {}


def _expert(*names: str):
    def deco(fn: Expert) -> Expert:
        for n in names:
            EXPERTS[n] = fn
        return fn
    return deco


def _norm(s: str) -> str:
    return " ".join(s.split()).strip().lower()


def _find(els: list[Element], kinds: tuple[str, ...], text: str | None = None) -> Element | None:
    """The first clickable element of ``kinds`` whose text is ``text`` (exact case first, then any case)."""
    cands = [e for e in els if e.kind in kinds and e.clickable]
    if text is None:
        return cands[0] if cands else None
    for same in (lambda a, b: " ".join(a.split()) == " ".join(b.split()), lambda a, b: _norm(a) == _norm(b)):
        for e in cands:
            if same(e.text, text):
                return e
    return None


def _click(e: Element | None) -> Action | None:
    return None if e is None else Action("click", e.id)


def _submit(els: list[Element], label: str = "submit") -> Action | None:
    return _click(_find(els, ("button",), label))


@_expert("click-test", "click-test-2", "click-test-transfer", "click-button")
def _click_button(utterance, fields, els, history):
    if "target" in fields:
        return _click(_find(els, ("button",), fields["target"]))
    return _click(_find(els, ("button",)))


@_expert("click-link")
def _click_link(utterance, fields, els, history):
    return _click(_find(els, ("link",), fields["target"]))


@_expert("click-tab")
def _click_tab(utterance, fields, els, history):
    return _click(_find(els, ("link",), f"Tab #{fields['target']}"))


@_expert("click-dialog")
def _click_dialog(utterance, fields, els, history):
    return _click(_find(els, ("button",), "x"))


@_expert("click-dialog-2")
def _click_dialog_2(utterance, fields, els, history):
    return _click(_find(els, ("button",), fields["target"]))


@_expert("focus-text")
def _focus_text(utterance, fields, els, history):
    return _click(next((e for e in els if e.typable), None))


@_expert("focus-text-2")
def _focus_text_2(utterance, fields, els, history):
    inputs = [e for e in els if e.typable]
    n = int(fields["target"])
    return _click(inputs[n - 1]) if 1 <= n <= len(inputs) else None


def _fill(els: list[Element], wanted: list[tuple[Element | None, str]], then: Action | None) -> Action | None:
    for el, text in wanted:
        if el is None:
            return None
        if el.text != text:
            return Action("type", el.id, text) if el.text == "" else None
    return then


@_expert("enter-text")
def _enter_text(utterance, fields, els, history):
    box = next((e for e in els if e.typable), None)
    return _fill(els, [(box, fields["target"])], _submit(els))


@_expert("enter-text-2")
def _enter_text_2(utterance, fields, els, history):
    box = next((e for e in els if e.typable), None)
    text = fields["text"].upper() if fields["case"] == "upper" else fields["text"].lower()
    return _fill(els, [(box, text)], _submit(els))


@_expert("enter-password")
def _enter_password(utterance, fields, els, history):
    boxes = [e for e in els if e.kind == "password"]
    if len(boxes) != 2:
        return None
    return _fill(els, [(b, fields["target"]) for b in boxes], _submit(els))


@_expert("login-user")
def _login_user(utterance, fields, els, history):
    user = _find(els, ("text",))
    pw = _find(els, ("password",))
    return _fill(els, [(user, fields["username"]), (pw, fields["password"])], _submit(els, "login"))


@_expert("click-checkboxes")
def _click_checkboxes(utterance, fields, els, history):
    targets = {_norm(v) for k, v in fields.items() if k.startswith("target")}
    for e in els:
        if e.kind == "checkbox" and (_norm(e.text) in targets) != e.checked:
            return Action("click", e.id)
    return _submit(els)


@_expert("click-option")
def _click_option(utterance, fields, els, history):
    radio = _find(els, ("radio",), fields["target"])
    if radio is None:
        return None
    if not radio.checked:
        return Action("click", radio.id)
    return _submit(els)


@_expert("click-button-sequence")
def _click_button_sequence(utterance, fields, els, history):
    label = "ONE" if not history else "TWO"
    return _click(_find(els, ("button",), label))


@_expert("click-widget")
def _click_widget(utterance, fields, els, history):
    # "Click on a "<kind>" widget.": the first clickable element of that kind (radio, checkbox,
    # text, textarea, button); a text input renders as kind "text".
    return _click(_find(els, (fields["target"],)))


SUPPORTED_TASKS: tuple[str, ...] = tuple(sorted(EXPERTS))


def expert_action(task: str, utterance: str, fields: dict, els: list[Element], history: list[Action]) -> Action | None:
    """The expert's next action on this page (``None``: it has none)."""
    try:
        fn = EXPERTS[task]
    except KeyError:
        raise ValueError(f"no scripted expert for MiniWoB++ task {task!r}; supported: {list(SUPPORTED_TASKS)}") from None
    return fn(utterance, fields, els, history)
