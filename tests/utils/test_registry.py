"""The one registry class: names -> parts, errors that list the valid names."""

import pytest

from grpolab.utils.registry import Registry


def test_register_get_and_errors():
    reg = Registry("widget", hint="(register new ones with register_widget)")

    @reg.register("a")
    def a():
        return 1

    assert reg.get("a") is a and reg["a"] is a and "a" in reg and list(reg) == ["a"] and len(reg) == 1
    reg.register("a")(a)  # the same object again (a re-imported module) is fine
    with pytest.raises(ValueError, match="widget 'a' is already registered.*overwrite=True"):
        reg.register("a")(lambda: 2)
    b = reg.register("a", overwrite=True)(lambda: 3)
    assert reg.get("a") is b
    with pytest.raises(ValueError, match=r"unknown widget 'z'; choose one of: a \(register new ones"):
        reg.get("z")
    with pytest.raises(ValueError, match="non-empty string"):
        reg.register("")
