"""A tiny name -> object registry with errors that list the valid names."""

from __future__ import annotations

from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to interchangeable parts (functions or classes) of one kind.

    ``kind`` is used in error messages, e.g. ``Registry("aggregation")`` raises
    ``ValueError: unknown aggregation 'tokn'; choose one of: token, sequence, ...``.
    """

    def __init__(self, kind: str, *, hint: str = "") -> None:
        self.kind = kind
        self.hint = hint  # appended to the unknown-name error, e.g. "(register new ones with ...)"
        self._items: dict[str, T] = {}

    def register(self, name: str, *, overwrite: bool = False) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name`` (``overwrite=True`` replaces an existing one)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} name must be a non-empty string, got {name!r}")

        def deco(obj: T) -> T:
            if name in self._items and not overwrite and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered; pick another name or pass "
                                 "overwrite=True")
            self._items[name] = obj
            return obj

        return deco

    def add(self, name: str, obj: T) -> T:
        return self.register(name)(obj)

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown {self.kind} {name!r}; choose one of: {', '.join(self._items)}"
                + (f" {self.hint}" if self.hint else "")
            ) from None

    def names(self) -> list[str]:
        return list(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __len__(self) -> int:
        return len(self._items)
