"""The "miniwob" environment: a policy clicks and types on real MiniWoB++ pages.

One :class:`MiniWoBEnv` runs one episode (the episode runner makes one per episode; they are
cheap): ``reset(item)`` returns the item's prompt (the page at the item's seed, rendered when
the item was made by :class:`grpolab.tasks.miniwob.MiniWoBTask`), and each action is carried out
in a real browser from the shared :class:`~grpolab.envs.miniwob.pool.MiniWoBPool`. A browser
holds one page, while the runner advances many episodes turn by turn, so a step is a *replay*:
the browser resets the task to the episode's seed, repeats the episode's earlier actions and
then the new one (MiniWoB++ instances are deterministic given the seed, and a one-step task
costs exactly one reset + one action). :meth:`MiniWoBEnv.step_batch` sends the steps of all live
episodes to the pool at once, so every browser works in parallel.

Observation after an action (see :mod:`grpolab.envs.miniwob.render` for the line format; the
mode is the item's ``meta["observation"]``, set by the task, so demonstrations agree with it):

* ``observation="changes"`` (default): the element lines that changed (``=[2] text "karrie"``,
  ``=[1] checkbox "au" checked``), the whole element list when the page's structure changed
  (a new tab's content), or ``=no change``;
* ``observation="page"``: the whole element list every time.

Invalid actions (unparsable, unknown id, typing into a button, > 64 characters) are counted
(``info["invalid"]``) and, per ``on_invalid``: "continue" (default; the observation is
``=error: ...``, nothing happens on the page, the turn is used up) or "end" (the episode ends
as a failure). ``invalid_penalty`` is subtracted from the return for each one.

Reward (when MiniWoB++ ends the episode): ``reward="binary"`` (default) gives 1.0 when the
task's raw reward is 1 and 0.0 otherwise; ``reward="raw"`` the raw reward itself (-1..1).
Neither depends on wall-clock time (MiniWoB++'s own reward decays with seconds spent, which
would leak the model's speed into the reward). Episodes the page does not end within the
runner's turn budget are truncations (0).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from grpolab.envs.base import StepResult, format_observation, register_env
from grpolab.envs.miniwob.pool import MiniWoBPool, shared_pool
from grpolab.envs.miniwob.render import ActionError, Element, parse_action, render_element

__all__ = ["MiniWoBEnv", "ON_INVALID", "OBSERVATIONS", "REWARDS", "EnvStats", "ENV_STATS", "observation_text"]

ON_INVALID = ("continue", "end")
OBSERVATIONS = ("changes", "page")
REWARDS = ("binary", "raw")


@dataclass
class EnvStats:
    """Process-wide counters: browser steps, episodes ended by the page, time inside the browsers."""

    steps: int = 0
    episodes_done: int = 0
    invalid: int = 0
    replay_errors: int = 0
    seconds: float = 0.0

    def reset(self) -> None:
        self.steps = self.episodes_done = self.invalid = self.replay_errors = 0
        self.seconds = 0.0


ENV_STATS = EnvStats()
_STATS_LOCK = threading.Lock()


def observation_text(before: list[Element], after: list[Element], *, mode: str, case: str) -> str:
    """What the policy sees after an action that left the episode running (before formatting)."""
    if mode == "page" or [(e.ref, e.kind) for e in before] != [(e.ref, e.kind) for e in after]:
        return "\n".join(render_element(e, case) for e in after)
    changed = [render_element(b, case) for a, b in zip(before, after)
               if render_element(a, case) != render_element(b, case)]
    return "\n".join(changed) if changed else "no change"


def _elements(raw: list[dict]) -> list[Element]:
    return [Element(**e) for e in raw]


@register_env("miniwob")
class MiniWoBEnv:
    """A MiniWoB++ episode over text (see the module docstring).

    Args:
        browsers: browsers in the shared pool (2 saturate 2 cores).
        netns: "auto" | "require" | "off" (see :mod:`grpolab.envs.miniwob.pool`).
        recycle_every: replace a browser after this many episodes.
        on_invalid: "continue" or "end".
        invalid_penalty: subtracted from the return per invalid action (>= 0).
        reward: "binary" or "raw".
        pool: use this pool instead of the shared one (tests).
    """

    def __init__(self, *, browsers: int = 2, netns: str = "auto", recycle_every: int = 2000,
                 on_invalid: str = "continue", invalid_penalty: float = 0.0, reward: str = "binary",
                 pool: MiniWoBPool | None = None) -> None:
        for label, v, allowed in (("on_invalid", on_invalid, ON_INVALID), ("reward", reward, REWARDS)):
            if v not in allowed:
                raise ValueError(f"env.options.{label} must be one of {allowed}, got {v!r}")
        if isinstance(invalid_penalty, bool) or not isinstance(invalid_penalty, (int, float)) or invalid_penalty < 0:
            raise ValueError(f"env.options.invalid_penalty must be a number >= 0, got {invalid_penalty!r}")
        self.on_invalid, self.invalid_penalty = on_invalid, float(invalid_penalty)
        self.reward_mode = reward
        self._pool = pool
        self._pool_args = (browsers, netns, recycle_every)
        self._item: Any = None

    @property
    def pool(self) -> MiniWoBPool:
        if self._pool is None:
            b, n, r = self._pool_args
            self._pool = shared_pool(b, netns=n, recycle_every=r)
        return self._pool

    def reset(self, item: Any) -> str:
        meta = item.meta
        if meta.get("env") != "miniwob" or "seed" not in meta or "elements" not in meta:
            raise ValueError("a miniwob item needs meta env='miniwob', 'task', 'seed' and 'elements' "
                             "(make items with task.name: miniwob)")
        self._item = item
        self.task, self.seed = meta["task"], int(meta["seed"])
        self.case, self.element_mode = meta.get("case", "keep"), meta.get("element_mode", "visible")
        self.observation_mode = meta.get("observation", "changes")
        self.elements = _elements(meta["elements"])
        self.history: list[list] = []
        self.done = False
        return item.prompt

    def step(self, action: str) -> StepResult:
        return self.step_batch([self], [action])[0]

    # -------------------------------------------------------------------------------------
    def _invalid(self, message: str) -> StepResult:
        with _STATS_LOCK:
            ENV_STATS.invalid += 1
        info = {"invalid": True, "task": self.task, "error": message}
        if self.on_invalid == "end":
            self.done = True
            info["success"] = False
            return StepResult("", reward=-self.invalid_penalty, done=True, info=info)
        return StepResult(format_observation("error: " + message), reward=-self.invalid_penalty, info=info)

    def _finish(self, res: dict) -> StepResult:
        if res.get("error"):  # the replay did not reproduce the page: count it, end as a failure
            with _STATS_LOCK:
                ENV_STATS.replay_errors += 1
            self.done = True
            return StepResult("", reward=0.0, done=True,
                              info={"task": self.task, "success": False, "replay_error": res["error"]})
        last = res["steps"][-1] if res["steps"] else res
        if last["done"]:
            self.done = True
            raw = float(last["raw_reward"])
            success = raw >= 1.0
            with _STATS_LOCK:
                ENV_STATS.episodes_done += 1
            reward = (1.0 if success else 0.0) if self.reward_mode == "binary" else raw
            return StepResult("", reward=reward, done=True,
                              info={"task": self.task, "success": success, "raw_reward": raw, "reason": last["reason"]})
        after = _elements(last["elements"])
        text = observation_text(self.elements, after, mode=self.observation_mode, case=self.case)
        self.elements = after
        return StepResult(format_observation(text), info={"task": self.task})

    @staticmethod
    def step_batch(envs: list["MiniWoBEnv"], actions: list[str]) -> list[StepResult]:
        """Step many episodes at once: invalid actions answered here, valid ones in the browsers."""
        out: list[StepResult | None] = [None] * len(envs)
        jobs: dict[int, list] = {}
        for k, (env, text) in enumerate(zip(envs, actions)):
            if env._item is None:
                raise RuntimeError("call reset(item) before step()")
            if env.done:
                raise RuntimeError("the episode is over; call reset(item) for a new one")
            try:
                act = parse_action(text, env.elements, case=env.case)
            except ActionError as e:
                out[k] = env._invalid(str(e))
                continue
            env.history.append([act.kind, act.id, act.text])
            jobs.setdefault(id(env.pool), []).append(k)
        t0 = time.perf_counter()
        for ks in jobs.values():
            pool = envs[ks[0]].pool
            results = pool.run([{"task": envs[k].task, "seed": envs[k].seed, "actions": envs[k].history,
                                 "elements": envs[k].element_mode} for k in ks])
            for k, res in zip(ks, results):
                out[k] = envs[k]._finish(res)
        if jobs:
            with _STATS_LOCK:
                ENV_STATS.steps += sum(len(ks) for ks in jobs.values())
                ENV_STATS.seconds += time.perf_counter() - t0
        return out  # type: ignore[return-value]
