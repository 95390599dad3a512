"""The "web" task: MiniWoB-style text pages with an instruction, for the "web" environment.

Four families, in increasing difficulty (``meta["difficulty"]`` 1..4; expert actions in brackets):

1. ``click`` -- "click the save button" / "click the help link"  [click, done]
2. ``type`` -- "type alice into the username field"  [type, done]
3. ``login`` -- "type alice into the username field and press login", or with a password
   "type alice into the username field, k3x into the password field and press login"
   [type, (type,) click, done]
4. ``checkboxes`` -- "tick every box labelled with a fruit" (1..3 fruits among 3..5 boxes)
   [click per fruit, done]

Every page has distractor elements (other buttons, links, inputs), elements in random order,
ids 1..n in page order; pages stay short (3..6 elements, about 100..160 characters), so a
prompt plus a whole episode fits the tiny model's context. Each item carries the scripted
expert's transcript (``meta["transcript"]``, recorded through :class:`grpolab.envs.WebEnv`) for
the warm start; see :mod:`grpolab.tasks.tool_arith` for the transcript format.
"""

from __future__ import annotations

import random

from grpolab.tasks.base import ProceduralTask, TaskItem, register_task
from grpolab.tasks.tool_arith import transcript_text

__all__ = ["FAMILIES", "WebTask"]

FAMILIES = ("click", "type", "login", "checkboxes")
BUTTONS = ("submit", "cancel", "save", "next", "back", "delete", "search", "reset", "ok", "send")
LINKS = ("home", "help", "about", "contact", "news", "faq")
INPUTS = ("email", "name", "city", "code", "phone", "search")
NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar")
FRUITS = ("apple", "pear", "plum", "fig", "lime", "kiwi", "mango", "peach", "grape", "lemon")
THINGS = ("chair", "desk", "lamp", "car", "shoe", "book", "door", "cup", "pen", "rug")


@register_task("web")
class WebTask(ProceduralTask):
    """Procedural web pages (see the module docstring).

    Args:
        families: which task families to draw from (uniformly), a subset of :data:`FAMILIES`.
        seed, eval_fraction: see :class:`ProceduralTask`.
    """

    name = "web"

    def __init__(self, *, families: list[str] | tuple[str, ...] = FAMILIES, seed: int = 0,
                 eval_fraction: float = 0.1) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        if isinstance(families, str):
            families = [families]
        bad = [f for f in families if f not in FAMILIES]
        if bad or not families:
            raise ValueError(f"WebTask.families must be a non-empty subset of {FAMILIES}, got {list(families)}")
        self.families = tuple(families)

    # each builder returns (instruction, elements without ids, goal by element index)
    def _click(self, rng):
        kind = rng.choice(("button", "button", "link"))
        pool = BUTTONS if kind == "button" else LINKS
        target = rng.choice(pool)
        others = [("button", b) for b in BUTTONS if b != target] + [("link", l) for l in LINKS if l != target]
        els = [(kind, target)] + rng.sample(others, rng.randint(2, 4))
        return f"click the {target} {kind}", els, {"click": [0]}

    def _type(self, rng):
        field = rng.choice(("username",) + INPUTS)
        text = rng.choice(NAMES)
        others = [("input", i) for i in ("username",) + INPUTS if i != field] + [("button", "submit")]
        els = [("input", field)] + rng.sample(others, rng.randint(2, 3))
        return f"type {text} into the {field} field", els, {"values": {0: text}}

    def _login(self, rng):
        user = rng.choice(NAMES)
        with_pw = rng.random() < 0.5
        els = [("input", "username"), ("button", "login")]
        values = {0: user}
        if with_pw:
            pw = "".join(rng.choice("abcdefghjkmnpqrstuvwxyz23456789") for _ in range(3))
            els.append(("input", "password"))
            values[2] = pw
            instr = f"type {user} into the username field, {pw} into the password field and press login"
        else:
            instr = f"type {user} into the username field and press login"
        distract = [("button", "cancel"), ("link", "help"), ("link", "forgot password"), ("button", "reset")]
        els += rng.sample(distract, rng.randint(1, 2))
        return instr, els, {"values": values, "click": [1]}

    def _checkboxes(self, rng):
        n_fruit = rng.randint(1, 3)
        n_box = rng.randint(max(3, n_fruit + 1), 5)
        fruits = rng.sample(FRUITS, n_fruit)
        things = rng.sample(THINGS, n_box - n_fruit)
        els = [("checkbox", f) for f in fruits] + [("checkbox", t) for t in things] + [("button", "submit")]
        return "tick every box labelled with a fruit", els, {"checked": list(range(n_fruit))}

    def generate(self, rng: random.Random) -> TaskItem:
        from grpolab.envs import make_env, render_page, run_script, web_expert

        family = rng.choice(self.families)
        instruction, els, goal_idx = getattr(self, f"_{family}")(rng)
        order = list(range(len(els)))
        rng.shuffle(order)
        id_of = {src: pos + 1 for pos, src in enumerate(order)}  # element index -> page id
        elements = [{"id": pos + 1, "kind": els[src][0], "label": els[src][1]} for pos, src in enumerate(order)]
        goal = {
            "click": sorted(id_of[i] for i in goal_idx.get("click", [])),
            "values": {str(id_of[i]): t for i, t in sorted(goal_idx.get("values", {}).items(), key=lambda kv: id_of[kv[0]])},
            "checked": sorted(id_of[i] for i in goal_idx.get("checked", [])),
        }
        prompt = render_page(instruction, elements)
        item = TaskItem(
            prompt=prompt, reference=instruction, reward="exact",
            meta={"env": "web", "family": family, "difficulty": FAMILIES.index(family) + 1,
                  "elements": elements, "goal": goal},
        )
        transcript, ret, done = run_script(make_env("web"), item, web_expert(item))
        if not (done and ret == 1.0):  # pragma: no cover - the expert is exact by construction
            raise RuntimeError(f"web expert failed on {prompt!r}")
        item.meta["transcript"] = transcript
        item.demonstration = transcript_text(transcript)
        item.privileged = item.demonstration
        return item
