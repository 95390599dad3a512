"""The "miniwob" task: real MiniWoB++ task instances (one per seed) for the "miniwob" environment.

``items(split, n)`` deals items round-robin over ``tasks``; item ``i`` is task
``tasks[i % T]`` at seed ``10_000_000 * seed + 2 * (i // T)`` (train) or ``... + 1`` (eval), so
train and eval never share a seed (they may share a *page*: click-test-2 has only a handful of
distinct texts; the held-out set is a set of held-out seeds, as in MiniWoB++). Making an item
runs the scripted expert on it in the browser (:mod:`grpolab.envs.miniwob.experts`): the first
page becomes the prompt and the expert's episode the demonstration (``meta["transcript"]``, in
exactly the text the environment produces). A seed the expert fails keeps its item, without a
demonstration. Browser results are cached on disk per task (``cache_dir``, default
``$GRPOLAB_CACHE_DIR`` or ``~/.cache/grpolab``), so the next run with the same seeds does not
start a browser to build its items. The cache directory is versioned (:data:`CACHE_VERSION`), so
results recorded by an older browser worker are never mixed with new ones: v2 began when
episodes stopped inheriting the keyboard focus of earlier episodes in the same tab
(:mod:`grpolab.envs.miniwob._worker`); v1 files hold history-dependent ``focused`` flags
(click-option's and click-test-transfer's buttons; prompts and demonstrations are unchanged).

Rendering options travel with each item (``meta``), so the prompt, the demonstrations and the
environment's observations always agree: ``case`` ("escape" for the tiny tokenizer, which has no
capitals; see :mod:`grpolab.envs.miniwob.render`), ``elements`` ("visible" or "interactive") and
``observation`` ("changes" or "page"; see :mod:`grpolab.envs.miniwob.env`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grpolab.tasks.base import TaskItem, check_split, register_task

__all__ = ["MiniWoBTask", "DEFAULT_TASKS"]

#: The tasks of the default study: one-step (click-test-2, click-button, click-link, focus-text,
#: click-dialog, click-tab) and multi-step (enter-text, login-user, click-checkboxes, click-option,
#: enter-password).
DEFAULT_TASKS = ("click-test-2", "click-button", "click-link", "focus-text", "click-dialog", "click-tab",
                 "enter-text", "login-user", "click-checkboxes", "click-option", "enter-password")
SEED_STRIDE = 10_000_000
CACHE_VERSION = "v2"  # see the module docstring


def _cache_dir(cache_dir: str | None) -> Path:
    base = cache_dir or os.environ.get("GRPOLAB_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "grpolab")
    return Path(base) / "miniwob" / CACHE_VERSION


@register_task("miniwob")
class MiniWoBTask:
    """MiniWoB++ task instances with expert demonstrations (see the module docstring).

    Args:
        tasks: MiniWoB++ task names (each needs a scripted expert:
            :data:`grpolab.envs.miniwob.SUPPORTED_TASKS`).
        seed: picks the seed range (train and eval are disjoint for every ``seed``).
        case, elements, observation: rendering (see the module docstring).
        max_expert_steps: the expert's step budget per episode.
        browsers, netns: the browser pool used to build items (shared with the environment).
        cache: reuse browser results from ``cache_dir``.
    """

    name = "miniwob"

    def __init__(self, *, tasks: list[str] | tuple[str, ...] | str = DEFAULT_TASKS, seed: int = 0,
                 case: str = "escape", elements: str = "visible", observation: str = "changes",
                 max_expert_steps: int = 8, browsers: int = 2, netns: str = "auto", cache: bool = True,
                 cache_dir: str | None = None, eval_fraction: float | None = None) -> None:
        from grpolab.envs.miniwob.env import OBSERVATIONS
        from grpolab.envs.miniwob.experts import SUPPORTED_TASKS
        from grpolab.envs.miniwob.render import CASES, ELEMENT_MODES

        if isinstance(tasks, str):
            tasks = [tasks]
        tasks = list(tasks)
        bad = [t for t in tasks if t not in SUPPORTED_TASKS]
        if not tasks or bad:
            raise ValueError(f"task.options.tasks must be a non-empty list of supported MiniWoB++ tasks; "
                             f"unsupported: {bad}; supported: {list(SUPPORTED_TASKS)}")
        if len(set(tasks)) != len(tasks):
            raise ValueError(f"task.options.tasks lists a task twice: {tasks}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"task.options.seed must be an int >= 0, got {seed!r}")
        for label, v, allowed in (("case", case, CASES), ("elements", elements, ELEMENT_MODES),
                                  ("observation", observation, OBSERVATIONS)):
            if v not in allowed:
                raise ValueError(f"task.options.{label} must be one of {allowed}, got {v!r}")
        if isinstance(max_expert_steps, bool) or not isinstance(max_expert_steps, int) or max_expert_steps < 1:
            raise ValueError(f"task.options.max_expert_steps must be an int >= 1, got {max_expert_steps!r}")
        self.tasks, self.seed = tuple(tasks), seed
        self.case, self.elements, self.observation = case, elements, observation
        self.max_expert_steps = max_expert_steps
        self.browsers, self.netns = browsers, netns
        self.cache, self.cache_dir = cache, cache_dir
        # eval_fraction is accepted for config compatibility and unused: splits are by seed

    def seed_of(self, split: str, i: int) -> tuple[str, int]:
        """``(task, seed)`` of item ``i`` of ``split``."""
        T = len(self.tasks)
        return self.tasks[i % T], SEED_STRIDE * self.seed + 2 * (i // T) + (1 if split == "eval" else 0)

    # ------------------------------------------------------------------------------------
    def _results(self, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], dict]:
        from grpolab.envs.miniwob.pool import shared_pool
        from grpolab.utils.io import atomic_write_text

        out: dict[tuple[str, int], dict] = {}
        cache_root = _cache_dir(self.cache_dir)
        by_task: dict[str, list[int]] = {}
        for task, seed in wanted:
            by_task.setdefault(task, []).append(seed)
        for task, seeds in by_task.items():
            path = cache_root / f"{task}-{self.elements}-{self.max_expert_steps}.json"
            cached: dict[str, dict] = {}
            if self.cache and path.exists():
                try:
                    cached = json.loads(path.read_text())
                except (OSError, json.JSONDecodeError):
                    cached = {}
            missing = [s for s in seeds if str(s) not in cached]
            if missing:
                pool = shared_pool(self.browsers, netns=self.netns)
                results = pool.run([{"task": task, "seed": s, "expert": True, "max_steps": self.max_expert_steps,
                                     "elements": self.elements} for s in missing])
                for s, res in zip(missing, results):
                    res.pop("ok", None)
                    cached[str(s)] = res
                if self.cache:
                    atomic_write_text(path, json.dumps(cached))
            for s in seeds:
                out[(task, s)] = cached[str(s)]
        return out

    def _item(self, task: str, seed: int, res: dict) -> TaskItem:
        from grpolab.envs.base import format_observation
        from grpolab.envs.miniwob.env import observation_text
        from grpolab.envs.miniwob.render import Action, Element, render_observation
        from grpolab.tasks.tool_arith import transcript_text

        els = [Element(**e) for e in res["elements"]]
        prompt = render_observation(res["utterance"] or "", els, case=self.case)
        transcript: list[list[str]] = []
        before = els
        for step in res["steps"]:
            transcript.append(["act", Action(*step["action"]).to_text(self.case)])
            if not step["done"]:
                after = [Element(**e) for e in step["elements"]]
                transcript.append(["obs", format_observation(
                    observation_text(before, after, mode=self.observation, case=self.case))])
                before = after
        solved = bool(res["done"]) and float(res["raw_reward"]) >= 1.0 and not res.get("error")
        meta = {"env": "miniwob", "task": task, "family": task, "seed": seed, "case": self.case,
                "element_mode": self.elements, "observation": self.observation, "elements": res["elements"],
                "fields": dict(res.get("fields") or {}),  # the page's task fields, e.g. {"target": "2"}
                "expert_solved": solved, "expert_steps": len(res["steps"])}
        demo = ""
        if solved:
            meta["transcript"] = transcript
            demo = transcript_text(transcript)
        return TaskItem(prompt=prompt, reference=task, reward="exact", demonstration=demo,
                        privileged=demo, meta=meta)

    def items(self, split: str, n: int) -> list[TaskItem]:
        """``n`` items of ``split`` (see the module docstring); deterministic and prefix-stable."""
        check_split(split, n)
        wanted = [self.seed_of(split, i) for i in range(n)]
        results = self._results(wanted)
        return [self._item(t, s, results[(t, s)]) for t, s in wanted]

    def __repr__(self) -> str:
        return f"MiniWoBTask(tasks={list(self.tasks)}, seed={self.seed}, case={self.case!r})"
