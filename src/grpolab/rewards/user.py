"""Rewards named in a config: built-in names, ``module:function``, entry points, weighted lists.

``task.options.reward`` (and :func:`resolve_reward` in Python) accepts

* a registered name: ``"math"``, ``"exact"``, ... (:func:`grpolab.rewards.list_rewards`);
* a name that an installed package registers through the ``grpolab.rewards`` entry point group
  (``[project.entry-points."grpolab.rewards"] brevity = "mypkg.rewards:brevity"``), loaded on
  first use;
* ``"pkg.module:function"`` (``function`` may be dotted, ``Class.method``): imported and registered
  under that string. The module must be importable by the process that trains (installed, or on
  ``PYTHONPATH``);
* a list of ``{name, weight, options}`` mappings (``weight`` defaults to 1, ``options`` to ``{}``),
  each ``name`` one of the forms above: the reward is ``sum(weight_i * score_i)``, registered
  under a name spelled from the list (e.g. ``"math*1+mypkg.rewards:brevity*0.2"``).

A user function has the built-ins' signature, ``fn(completion, reference, **options) ->
RewardResult | float``, and runs under the same contract: the trainer calls it through
:func:`grpolab.rewards.safe_score`, so an exception, a non-finite or non-numeric score, or a
time-out scores 0.0 with ``info["error"]``; so does a reward that calls ``sys.exit`` or raises
``KeyboardInterrupt`` (:func:`guarded`), and a working-directory change is undone. In a weighted list each part is scored on its own: a
failing part contributes 0, names itself in ``info["error"]`` and leaves the other parts' scores
standing. Every part gets the item's reward options that it declares (all of them when it takes
``**options``) updated with the part's own ``options``.

A bad spec raises :class:`RewardSpecError` (a ``ValueError``) naming what is wrong: a module that
cannot be imported, a missing attribute, something that is not callable or does not take
``(completion, reference)``, a weight that is not a number.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from grpolab.rewards.base import (
    RewardResult,
    VerifierTimeout,
    get_reward,
    list_rewards,
    register_reward,
    score,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "RewardPart",
    "RewardSpecError",
    "UserRewardExit",
    "WeightedReward",
    "entry_point_rewards",
    "guarded",
    "load_entry_point_reward",
    "resolve_reward",
]

#: The entry point group through which installed packages add rewards.
ENTRY_POINT_GROUP = "grpolab.rewards"

_PART_KEYS = ("name", "weight", "options")


class RewardSpecError(ValueError):
    """A reward spec (name, ``module:function`` or weighted list) that cannot be used."""


def entry_point_rewards() -> dict[str, Any]:
    """The ``grpolab.rewards`` entry points of the installed packages, by name (not loaded)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_entry_point_reward(name: str) -> Callable[..., Any] | None:
    """Load and register the entry point ``name`` of the ``grpolab.rewards`` group; None if absent.

    Raises:
        RewardSpecError: the entry point exists but cannot be loaded or is not a reward function.
    """
    ep = entry_point_rewards().get(name)
    if ep is None:
        return None
    try:
        fn = ep.load()
    except Exception as exc:  # noqa: BLE001 - a broken plugin: say which and why
        raise RewardSpecError(
            f"reward {name!r} (entry point {ep.value!r} of group {ENTRY_POINT_GROUP!r}) cannot be "
            f"loaded: {type(exc).__name__}: {exc}"
        ) from None
    _check_signature(fn, f"reward {name!r} (entry point {ep.value!r})")
    register_reward(name, overwrite=True)(guarded(fn, name))
    return fn


class UserRewardExit(RuntimeError):
    """A user reward tried to end the process (``sys.exit``, ``KeyboardInterrupt``): its failure."""


def _trainer_owns_signals() -> bool:
    """Whether the trainer's stop handlers are installed (a real Ctrl-C then raises :class:`Interrupted`)."""
    import signal

    return bool(getattr(signal.getsignal(signal.SIGINT), "grpolab_stop", False))


def guarded(fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """``fn`` as a reward that cannot end or move the run: ``SystemExit`` (``sys.exit``, ``exit()``)
    and a ``KeyboardInterrupt`` it raises itself become :class:`UserRewardExit` (an ``Exception``,
    so :func:`~grpolab.rewards.safe_score` scores the completion 0 with ``info["error"]`` and the
    trainer warns about a failing reward), and a change of the working directory is undone. A real
    Ctrl-C, SIGTERM or SIGHUP (:class:`~grpolab.errors.Interrupted`) still stops the run.
    ``os._exit`` cannot be caught in-process: with ``rollout.user_reward_process`` the call runs in
    a worker process under its registry ``name`` (:mod:`grpolab.rewards.user_worker`)."""
    import functools
    import os

    from grpolab.errors import Interrupted

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        from grpolab.rewards.user_worker import isolation

        worker = isolation() if name is not None else None
        if worker is not None:
            return worker.call(name, args, kwargs)
        cwd = os.getcwd()
        try:
            return fn(*args, **kwargs)
        except SystemExit as exc:
            raise UserRewardExit(f"the reward called sys.exit({exc.code!r}); a reward returns a score, it "
                                 "cannot end the run") from None
        except KeyboardInterrupt as exc:
            if isinstance(exc, Interrupted) or not _trainer_owns_signals():
                raise
            raise UserRewardExit("the reward raised KeyboardInterrupt; a reward returns a score, it cannot "
                                 "end the run") from None
        finally:
            try:
                moved = os.getcwd() != cwd
            except OSError:  # it deleted the folder it moved to
                moved = True
            if moved:
                os.chdir(cwd)

    call.grpolab_guarded = True  # type: ignore[attr-defined]
    return call


def _check_signature(fn: Any, what: str) -> None:
    if not callable(fn):
        raise RewardSpecError(
            f"{what} is a {type(fn).__name__}, not a function; a reward is "
            "fn(completion, reference, **options) -> RewardResult | float"
        )
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: trust them
        return
    try:
        sig.bind("completion", "reference")
    except TypeError as exc:
        raise RewardSpecError(
            f"{what} cannot be called as fn(completion, reference) ({exc}); a reward is "
            "fn(completion, reference, **options) -> RewardResult | float"
        ) from None


def _import_function(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    module_name, attr = module_name.strip(), attr.strip()
    if not module_name or not attr:
        raise RewardSpecError(
            f"reward {spec!r}: write 'package.module:function' (both parts non-empty)"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise RewardSpecError(
                f"reward {spec!r}: module {module_name!r} cannot be imported ({exc}); install its "
                "package or put its folder on PYTHONPATH"
            ) from None
        raise RewardSpecError(
            f"reward {spec!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    except Exception as exc:  # noqa: BLE001 - the user's module raised while importing
        raise RewardSpecError(
            f"reward {spec!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    path: list[str] = []
    for part in attr.split("."):
        if not hasattr(obj, part):
            owner = module_name + (":" + ".".join(path) if path else "")
            names = sorted(n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None)))
            raise RewardSpecError(
                f"reward {spec!r}: {owner!r} has no attribute {part!r}"
                + (f" (its callables: {', '.join(names[:20])})" if names else "")
            )
        obj = getattr(obj, part)
        path.append(part)
    _check_signature(obj, f"reward {spec!r}")
    return obj


def _resolve_name(spec: str) -> str:
    """A single reward spec -> a name registered in the reward registry."""
    spec = spec.strip()
    if not spec:
        raise RewardSpecError("reward name is empty; use a registered name such as 'math', or "
                              "'package.module:function'")
    if spec in list_rewards():
        return spec
    if ":" in spec:
        fn = _import_function(spec)
        register_reward(spec, overwrite=True)(guarded(fn, spec))
        return spec
    if load_entry_point_reward(spec) is not None:
        return spec
    plugins = sorted(entry_point_rewards())
    raise RewardSpecError(
        f"unknown reward {spec!r}; registered rewards: {list_rewards()}"
        + (f", entry points ({ENTRY_POINT_GROUP}): {plugins}" if plugins else "")
        + "; or name a function of yours as 'package.module:function' (or register it with "
        "grpolab.rewards.register_reward)"
    )


@dataclass(frozen=True)
class RewardPart:
    """One term of a weighted reward: ``weight * score(name, ..., **options)``."""

    name: str
    weight: float
    options: tuple[tuple[str, Any], ...] = ()


def _options_for(fn: Callable[..., Any], item_options: Mapping[str, Any]) -> dict[str, Any]:
    """The item options ``fn`` declares (all of them when it takes ``**options``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return dict(item_options)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(item_options)
    names = {p.name for p in params if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                  inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    return {k: v for k, v in item_options.items() if k in names}


class WeightedReward:
    """``sum(weight_i * score_i)`` over :class:`RewardPart` s; a registered reward function.

    ``info`` holds each part's score under ``"parts"`` (by name), each part's own info under
    ``"part_info"``, and ``"error"`` when any part failed (that part scores 0).
    """

    def __init__(self, parts: Sequence[RewardPart]) -> None:
        self.parts = tuple(parts)
        self.__name__ = self.__qualname__ = spell_weighted(self.parts)
        self.__module__ = __name__

    def __call__(self, completion: str, reference: Any, **item_options: Any) -> RewardResult:
        total, scores, infos, errors = 0.0, {}, {}, []
        for i, part in enumerate(self.parts):
            key = part.name if part.name not in scores else f"{part.name}#{i}"
            options = {**_options_for(get_reward(part.name), item_options), **dict(part.options)}
            try:
                res = score(part.name, completion, reference, **options)
            except VerifierTimeout:
                raise  # the whole reward ran out of time: safe_score scores it 0
            except Exception as exc:  # noqa: BLE001 - one failing part scores 0, the rest stand
                res = RewardResult(0.0, {"error": f"{type(exc).__name__}: {exc}"})
            scores[key] = res.score
            infos[key] = res.info
            if "error" in res.info:
                errors.append(f"{key}: {res.info['error']}")
            total += part.weight * res.score
        info: dict[str, Any] = {"parts": scores, "part_info": infos}
        if errors:
            info["error"] = "; ".join(errors)
        return RewardResult(total, info)


def spell_weighted(parts: Sequence[RewardPart]) -> str:
    """The registry name of a weighted reward, e.g. ``"math*1+mypkg.rewards:brevity*0.2"``."""
    terms = []
    for p in parts:
        term = f"{p.name}*{p.weight:g}"
        if p.options:
            term += json.dumps(dict(p.options), sort_keys=True, separators=(",", ":"), default=repr)
        terms.append(term)
    return "+".join(terms)


def _part(entry: Any, index: int) -> RewardPart:
    where = f"reward list entry {index}"
    if isinstance(entry, str):
        entry = {"name": entry}
    if not isinstance(entry, Mapping):
        raise RewardSpecError(
            f"{where} is {entry!r}; write a mapping such as {{name: math, weight: 1.0}}"
        )
    unknown = sorted(set(entry) - set(_PART_KEYS))
    if unknown:
        raise RewardSpecError(f"{where} has unknown key(s) {unknown}; allowed: {list(_PART_KEYS)}")
    if "name" not in entry or not isinstance(entry["name"], str):
        raise RewardSpecError(f"{where} needs a 'name' (a reward name or 'package.module:function'), "
                              f"got {entry.get('name')!r}")
    weight = entry.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
        raise RewardSpecError(
            f"{where} ({entry['name']!r}): weight {weight!r} is not a number; write e.g. weight: 0.2"
        )
    options = entry.get("options", {}) or {}
    if not isinstance(options, Mapping):
        raise RewardSpecError(f"{where} ({entry['name']!r}): options must be a mapping, got {options!r}")
    name = _resolve_name(entry["name"])
    return RewardPart(name, float(weight), tuple(sorted(options.items())))


def resolve_reward(spec: Any) -> str:
    """Make the reward ``spec`` usable and return its registry name (see the module docstring).

    Importing a user module or an entry point happens here, once; the returned name is what a
    :class:`grpolab.tasks.TaskItem` carries in ``reward``.

    Raises:
        RewardSpecError: the spec cannot be used (the message says why and what to write).
    """
    if isinstance(spec, str):
        return _resolve_name(spec)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise RewardSpecError("the reward list is empty; give at least one {name, weight}")
        parts = [_part(entry, i) for i, entry in enumerate(spec)]
        combined = WeightedReward(parts)
        name = combined.__name__
        try:
            existing = get_reward(name)
        except ValueError:
            existing = None
        if not (isinstance(existing, WeightedReward) and existing.parts == combined.parts):
            register_reward(name, overwrite=True)(combined)
        return name
    if isinstance(spec, Mapping):
        return resolve_reward([spec])
    raise RewardSpecError(
        f"reward {spec!r} is a {type(spec).__name__}; write a reward name ('math'), "
        "'package.module:function', or a list of {name, weight}"
    )


def _install() -> None:
    """Let :func:`grpolab.rewards.base.get_reward` resolve names it has not seen (see its docstring)."""
    from grpolab.rewards import base

    base._NAME_RESOLVER = resolve_reward


_install()
