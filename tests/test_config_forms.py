"""Every config key's error text agrees with its help: for each key whose form (``_key(form=...)``,
what ``grpolab config`` prints) states a numeric range (``> 0``, ``>= 0``, ``[0, 1)``, ``1 to 64``),
a value just outside the range is refused with an error that names the key and states that same
range, and the value at (or just inside) each bound is accepted. A validator stricter or looser
than the help, or an error text that says another range, fails here."""

import dataclasses
import re

import pytest

from grpolab.config import Config, ConfigError, load_config

_NUM = r"-?\d+(?:\.\d+)?"
#: overrides that keep another key's rule out of the way of an in-range value (the two-key rules)
CONTEXT = {"model.hidden_size": ["model.num_heads=1"], "task.n_train": ["rollout.prompts_per_step=1"],
           "env.max_total_tokens": ["env.max_turn_tokens=1"], "trainer.mini_batches": [],
           "env.max_turn_tokens": []}


def parse_form(form: str):
    """``(lo, lo_closed, hi, hi_closed, text)`` of a numeric form's range (None for an open side),
    ``text`` the range as an error must state it; None when the form states no numeric range."""
    if m := re.match(rf"(>=|>) ({_NUM})", form):
        return float(m[2]), m[1] == ">=", None, False, m[0]
    if m := re.match(rf"([\[(])({_NUM}), ({_NUM})([\])])", form):
        return float(m[2]), m[1] == "[", float(m[3]), m[4] == "]", m[0]
    if m := re.match(rf"({_NUM}) to ({_NUM})", form):
        return float(m[1]), True, float(m[2]), True, f"[{m[1]}, {m[2]}]"
    return None


def ranged_keys():
    cfg = Config()
    out = []
    for section in dataclasses.fields(cfg):
        value = getattr(cfg, section.name)
        if not dataclasses.is_dataclass(value):
            continue
        for f in dataclasses.fields(value):
            form = f.metadata.get("form", "")
            if parse_form(form):
                is_int = "int" in str(f.type) and "float" not in str(f.type)
                out.append(pytest.param(f"{section.name}.{f.name}", form, is_int, id=f"{section.name}.{f.name}"))
    return out


def _values(form: str, is_int: bool):
    """``(outside, inside)``: values just past each bound, and the bound itself (or just inside)."""
    lo, lo_closed, hi, hi_closed, _ = parse_form(form)
    step = 1 if is_int else 0.1
    outside = [lo - step if lo_closed else lo]
    inside = [lo if lo_closed else (lo + step if hi is None else (lo + hi) / 2)]
    if hi is not None:
        outside.append(hi + step if hi_closed else hi)
        inside.append(hi if hi_closed else (lo + hi) / 2)
    cast = int if is_int else (lambda v: round(v, 6))
    return [cast(v) for v in outside], [cast(v) for v in inside]


def states_range(message: str, key: str, form: str) -> bool:
    """Whether an error ``message`` about ``key`` names it and states the range of its ``form``."""
    return key.split(".")[1] in message and parse_form(form)[-1] in message


@pytest.mark.parametrize("key, form, is_int", ranged_keys())
def test_error_text_states_the_forms_range(key, form, is_int):
    outside, inside = _values(form, is_int)
    # a stricter rule the form names in parentheses ("> 0 (>= 2 for group advantages)"): the
    # built-in settings always need it, so its bound is the one checked
    if m := re.search(rf"\((>=|>) ({_NUM}) for ", form):
        form = f"{m[1]} {m[2]}"
        outside, inside = _values(form, is_int)
    for v in outside:
        with pytest.raises(ConfigError) as e:
            load_config(overrides=[f"{key}={v}"])
        assert states_range(str(e.value), key, form), f"{key}={v}: form {form!r}, error {str(e.value)!r}"
    for v in inside:
        load_config(overrides=CONTEXT.get(key, []) + [f"{key}={v}"])


def test_the_ranged_forms_are_found():
    """The parser reads every range-like form (a form that starts with a comparison, a bracket or a
    number and is not parsed would leave its key unchecked)."""
    keys = ranged_keys()
    assert len(keys) >= 60
    cfg = Config()
    unread = [f"{s.name}.{f.name}: {f.metadata['form']!r}" for s in dataclasses.fields(cfg)
              if dataclasses.is_dataclass(getattr(cfg, s.name)) for f in dataclasses.fields(getattr(cfg, s.name))
              if re.match(r"[<>\[(]|\d+ to", f.metadata.get("form", "")) and not parse_form(f.metadata["form"])]
    assert unread == []


def test_a_drifted_text_would_fail():
    """The texts this test caught before they were fixed fail it, the fixed ones pass."""
    rounds = "rollout.dynamic_sampling_rounds"
    assert not states_range(f"{rounds}=0 must be > 0", rounds, "1 to 64")
    assert states_range(f"{rounds}=0 must be in [1, 64] (each round samples a new batch)", rounds, "1 to 64")
    assert not states_range("credit: k=-1.0 must be a finite number >= 0", "credit.gear_k", ">= 0")
    assert not states_range("optim.beta1=1.0 must be in [0, 1]", "optim.beta1", "[0, 1)")
