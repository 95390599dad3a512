"""Reward results and the reward registry.

A reward (verifier) is a plain function ``fn(completion: str, reference: str, **options)`` that
returns a :class:`RewardResult` (a bare number is accepted and wrapped). Rewards register under
a name with :func:`register_reward`; tasks name the reward of each item, and the trainer scores a
completion with :func:`safe_score`, which never raises: a verifier that crashes, times out or is
misnamed gives score 0.0 and says why in ``info["error"]``, so one bad completion cannot kill a
training run.
"""

from __future__ import annotations

import math
import signal
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol

# Wall-clock limit for one in-process verifier call made through ``safe_score`` (seconds; None or
# 0 disables). Enforced with SIGALRM, so only in the main thread on Unix, and only between Python
# bytecodes: a verifier stuck inside one C call (a pathological regex, say) is not interrupted.
# Untrusted code runs in the sandboxed subprocess verifiers instead, which kill on timeout.
VERIFIER_TIME_LIMIT_S: float | None = 10.0


class VerifierTimeout(Exception):
    """A verifier ran past :data:`VERIFIER_TIME_LIMIT_S`."""


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`VerifierTimeout` in the body after ``seconds`` (no-op where unsupported)."""
    usable = (seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def on_alarm(signum, frame):  # noqa: ARG001
        raise VerifierTimeout(f"verifier took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

__all__ = [
    "RewardFn",
    "RewardResult",
    "VerifierTimeout",
    "get_reward",
    "list_rewards",
    "register_reward",
    "safe_score",
    "score",
]


@dataclass
class RewardResult:
    """The verdict on one completion.

    Attributes:
        score: the reward, a finite float (1.0 / 0.0 for binary verifiers).
        info: JSON-friendly details: what was extracted, how it matched, or ``"error"``.
    """

    score: float
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.score, bool):
            self.score = float(self.score)
        if not isinstance(self.score, (int, float)):
            raise TypeError(
                f"RewardResult.score must be a real number, got {type(self.score).__name__} "
                f"({self.score!r})"
            )
        self.score = float(self.score)
        if not math.isfinite(self.score):
            raise ValueError(f"RewardResult.score must be finite, got {self.score}")
        if not isinstance(self.info, dict):
            raise TypeError(f"RewardResult.info must be a dict, got {type(self.info).__name__}")


class RewardFn(Protocol):
    """``fn(completion, reference, **options) -> RewardResult`` (or a bare number)."""

    def __call__(self, completion: str, reference: str, **options: Any) -> RewardResult | float: ...


_REWARDS: dict[str, Callable[..., Any]] = {}
#: Turns a name that is not registered yet (``package.module:function``, an entry point) into a
#: registered one: :func:`grpolab.rewards.user.resolve_reward`, installed by that module, so that
#: the registry does not import the module that imports it.
_NAME_RESOLVER: Callable[[str], str] | None = None


def register_reward(name: str, *, overwrite: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register ``fn(completion, reference, **options)`` under ``name``.

    Raises:
        ValueError: ``name`` is already taken (pass ``overwrite=True`` to replace it).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"reward name must be a non-empty string, got {name!r}")

    def decorator(fn: Callable) -> Callable:
        if not callable(fn):
            raise TypeError(f"register_reward({name!r}) needs a callable, got {fn!r}")
        if name in _REWARDS and not overwrite and _REWARDS[name] is not fn:
            raise ValueError(
                f"reward {name!r} is already registered (by {_REWARDS[name].__module__}."
                f"{getattr(_REWARDS[name], '__qualname__', _REWARDS[name])}); pick another name "
                "or pass overwrite=True"
            )
        _REWARDS[name] = fn
        return fn

    return decorator


def list_rewards() -> list[str]:
    """Names of all registered rewards, sorted."""
    return sorted(_REWARDS)


def get_reward(name: str) -> Callable[..., Any]:
    """The reward function registered under ``name``.

    A name not registered yet is looked up as ``"package.module:function"`` (imported and
    registered) or as an entry point of the ``grpolab.rewards`` group
    (:mod:`grpolab.rewards.user`).

    Raises:
        ValueError: unknown name (the message lists the known ones), or a ``module:function``
            / entry point that cannot be loaded (the message says why).
    """
    try:
        return _REWARDS[name]
    except (KeyError, TypeError):
        pass
    if not isinstance(name, str):
        raise ValueError(
            f"unknown reward {name!r}; known rewards: {list_rewards()} "
            "(register new ones with grpolab.rewards.register_reward)"
        )
    if _NAME_RESOLVER is None:  # grpolab.rewards.user installs it when the package is imported
        raise ValueError(f"unknown reward {name!r}; known rewards: {list_rewards()}")
    try:
        return _REWARDS[_NAME_RESOLVER(name)]
    except ValueError as e:  # RewardSpecError: reported as the ValueError it is
        raise ValueError(str(e)) from None


def score(name: str, completion: str, reference: Any, /, **options: Any) -> RewardResult:
    """Score ``completion`` against ``reference`` with the reward ``name``. May raise.

    ``reference`` is whatever the reward takes: an answer string (``math``, ``exact``), a list of
    test snippets (``code``), a dict with the database and reference query (``sql``), a JSON
    schema (``json_schema``); the structured ones also accept it JSON-encoded in a string (the
    form a dataset column holds). Each reward checks its own reference type.
    """
    fn = get_reward(name)
    if not isinstance(completion, str):
        raise TypeError(f"completion must be a str, got {type(completion).__name__}")
    if reference is None:
        raise TypeError(f"reward {name!r} got reference=None; pass the item's reference")
    result = fn(completion, reference, **options)
    if isinstance(result, RewardResult):
        return result
    if isinstance(result, (bool, int, float)):
        return RewardResult(float(result), {})
    raise TypeError(
        f"reward {name!r} returned {type(result).__name__}; a reward must return a "
        "RewardResult or a number"
    )


def safe_score(name: str, completion: str, reference: Any, /, **options: Any) -> RewardResult:
    """Like :func:`score`, but never raises (for ``Exception``; Ctrl-C still stops).

    Any failure (unknown reward, bad arguments, a crashing verifier, a non-finite score) becomes
    ``RewardResult(0.0, {"error": "<ExceptionType>: <message>", "reward": name})``.
    """
    try:
        with time_limit(VERIFIER_TIME_LIMIT_S):
            return score(name, completion, reference, **options)
    except Exception as exc:  # noqa: BLE001 - the whole point: never raise into the trainer
        return RewardResult(0.0, {"error": f"{type(exc).__name__}: {exc}", "reward": str(name)})
