"""The environment protocol, step results, the env registry, and the action syntax.

An environment runs one episode over text::

    env = make_env("web")
    obs = env.reset(item)            # the first observation: the episode's prompt
    res = env.step("click(3)")       # StepResult(observation, reward, done, info)

Action syntax (all built-in environments): one action per model turn, written as a function
call ``name(arguments)``; the model ends its turn with its end-of-sequence token. Examples:
``calc(4821*37+995)``, ``answer(179372)``, ``click(3)``, ``type(2,"alice")``, ``done()``.
Observations come back as ``"\\n=" + text + "\\n"`` (see :func:`format_observation`), so that the
model can tell its own text from the environment's; the full format is in ``docs/envs.md``.

``StepResult.info`` uses these keys (all optional): ``invalid`` (the action could not be parsed
or named something that does not exist), ``tool_error`` (a tool ran and failed: a syntax error,
a timeout, an exception), ``tool`` (the name of the tool called).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from grpolab.utils.registry import Registry

__all__ = [
    "ENVS",
    "Env",
    "StepResult",
    "format_observation",
    "list_envs",
    "make_env",
    "parse_call",
    "register_env",
    "run_script",
    "step_envs",
]


@dataclass
class StepResult:
    """What one environment step returns.

    Attributes:
        observation: text appended to the episode after the model's action (unused when done).
        reward: reward for this step; an episode's return is the sum over its steps.
        done: the episode is over.
        info: details (``invalid``, ``tool_error``, ``tool``, ...).
    """

    observation: str
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """A multi-turn text environment; one instance runs one episode at a time."""

    def reset(self, item: Any) -> str:
        """Start an episode for ``item`` (a :class:`grpolab.tasks.TaskItem`); returns the prompt."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply the model's action text (one turn, without the EOS token)."""
        ...


def format_observation(text: str) -> str:
    """The text appended after a model turn: ``"\\n=" + text + "\\n"``."""
    return "\n=" + text + "\n"


_CALL = re.compile(r"\s*([a-z_][a-z0-9_]*)\((.*)\)\s*", re.DOTALL)


def parse_call(action: str) -> tuple[str, str] | None:
    """``"click(3)" -> ("click", "3")``; ``None`` if ``action`` is not one ``name(args)`` call.

    The argument text is returned raw (everything between the first ``(`` and the last ``)``).
    """
    m = _CALL.fullmatch(action)
    if m is None:
        return None
    return m.group(1), m.group(2)


ENVS: Registry[Callable[..., Env]] = Registry("environment")


def register_env(name: str) -> Callable[[Callable[..., Env]], Callable[..., Env]]:
    """Decorator: register an environment class (or factory taking keyword options)."""
    return ENVS.register(name)


def list_envs() -> list[str]:
    """Names of the registered environments."""
    return sorted(ENVS.names())


def make_env(name: str, /, **options: Any) -> Env:
    """A fresh environment instance (one per concurrent episode).

    Raises:
        ValueError: unknown name (the message lists the registered ones) or bad options.
    """
    factory = ENVS.get(name)
    try:
        return factory(**options)
    except TypeError as e:
        raise ValueError(f"environment {name!r}: bad options {options}: {e}") from None


def step_envs(envs: list[Env], actions: list[str]) -> list[StepResult]:
    """``[env.step(a) for env, a in zip(envs, actions)]``, in order, except that environments
    whose class defines ``step_batch(envs, actions)`` get all their steps in one call (so that an
    environment backed by processes, e.g. the browsers of "miniwob", can run them in parallel).
    """
    out: list[StepResult | None] = [None] * len(envs)
    batched: dict[type, list[int]] = {}
    for k, env in enumerate(envs):
        if hasattr(type(env), "step_batch"):
            batched.setdefault(type(env), []).append(k)
        else:
            out[k] = env.step(actions[k])
    for cls, ks in batched.items():
        for k, res in zip(ks, cls.step_batch([envs[k] for k in ks], [actions[k] for k in ks])):
            out[k] = res
    return out  # type: ignore[return-value]


def run_script(env: Env, item: Any, actions: list[str]) -> tuple[list[list[str]], float, bool]:
    """Play a fixed list of actions (a scripted expert) through ``env``.

    Returns:
        ``(transcript, episode_return, done)`` with ``transcript`` a list of ``[role, text]``
        pairs after the prompt: ``["act", action]`` for each action (the model ends each with
        EOS) and ``["obs", observation]`` for each observation that follows one.
    """
    env.reset(item)
    transcript: list[list[str]] = []
    total = 0.0
    for action in actions:
        res = env.step(action)
        transcript.append(["act", action])
        total += float(res.reward)
        if res.done:
            return transcript, total, True
        transcript.append(["obs", res.observation])
    return transcript, total, False
