"""Tool-calling question answering: the "tool_arith" environment (and any task with tools).

An episode::

    prompt (first observation):  "q: 4821*37+995\\n"
    model:                       "calc(4821*37+995)"  <eos>
    observation:                 "\\n=179372\\n"
    model:                       "answer(179372)"     <eos>   -> done, reward 1.0

Actions: ``<tool>(<argument>)`` for each enabled tool (``calc``, ``python``, ``sql``: see
:mod:`grpolab.envs.tools`), and ``answer(<text>)``, which ends the episode with reward 1.0 if the
answer equals ``item.reference`` (numbers compare by value: ``179372.0 == 179372``) and 0.0
otherwise. Anything else is an invalid action (observation ``=error: ...``, the episode goes on).
A failing tool call is a tool error (observation ``=error: ...``). Running out of turns or tokens
ends the episode with reward 0 (the episode runner handles that).

The item may restrict or extend the tools (``item.meta["tools"]``, a list of names) and give the
SQL tool its database (``item.meta["db_path"]``).
"""

from __future__ import annotations

from typing import Any

from grpolab.envs.base import StepResult, format_observation, parse_call, register_env
from grpolab.envs.tools import CalcTool, PythonTool, SqlTool

__all__ = ["ToolEnv", "answers_match"]

TOOL_NAMES = ("calc", "python", "sql")


def answers_match(given: str, reference: str) -> bool:
    """Stripped string equality, or equal as numbers when both parse as numbers."""
    g, r = given.strip(), reference.strip()
    if g == r:
        return True
    try:
        return float(g) == float(r)
    except ValueError:
        return False


class ToolEnv:
    """Question answering with tools (see the module docstring).

    Args:
        tools: names of the tools the agent may call (subset of calc, python, sql).
        calc_backend: "ast" (in-process, default) or "sandbox" (through the code sandbox).
        timeout_s: per-call limit for the python/sandboxed tools and SQL queries.
    """

    def __init__(self, *, tools: list[str] | tuple[str, ...] = ("calc",), calc_backend: str = "ast",
                 timeout_s: float = 2.0) -> None:
        bad = [t for t in tools if t not in TOOL_NAMES]
        if bad or not tools:
            raise ValueError(f"tools must be a non-empty subset of {TOOL_NAMES}, got {list(tools)}")
        self.tool_names = tuple(tools)
        self.calc_backend = calc_backend
        self.timeout_s = timeout_s
        self._item: Any = None
        self._tools: dict[str, Any] = {}

    def _build_tools(self, names, db_path: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in names:
            if name == "calc":
                out[name] = CalcTool(backend=self.calc_backend, timeout_s=self.timeout_s)
            elif name == "python":
                out[name] = PythonTool(timeout_s=self.timeout_s)
            elif name == "sql":
                if not db_path:
                    raise ValueError("the sql tool needs item.meta['db_path'] (a SQLite file)")
                out[name] = SqlTool(db_path, timeout_s=self.timeout_s)
        return out

    def reset(self, item: Any) -> str:
        self._item = item
        names = item.meta.get("tools")
        if names is None:  # the env's own list; sql only where the item brings a database
            names = [t for t in self.tool_names if t != "sql" or item.meta.get("db_path")]
        self._tools = self._build_tools(names, item.meta.get("db_path"))
        return item.prompt

    def step(self, action: str) -> StepResult:
        if self._item is None:
            raise RuntimeError("call reset(item) before step()")
        call = parse_call(action)
        if call is None:
            return StepResult(format_observation("error: bad action"),
                              info={"invalid": True})
        name, arg = call
        if name == "answer":
            ok = answers_match(arg, self._item.reference)
            return StepResult("", reward=1.0 if ok else 0.0, done=True, info={"answer": arg.strip()})
        tool = self._tools.get(name)
        if tool is None:
            return StepResult(format_observation(f"error: unknown action {name}"),
                              info={"invalid": True})
        out = tool(arg)
        return StepResult(format_observation(out.text), info={"tool": name, "tool_error": out.error})


@register_env("tool_arith")
def _tool_arith(**options: Any) -> ToolEnv:
    """The tool-integrated arithmetic environment: a :class:`ToolEnv` with the calculator."""
    options.setdefault("tools", ("calc",))
    return ToolEnv(**options)


@register_env("tools")
def _tools(**options: Any) -> ToolEnv:
    """A :class:`ToolEnv` with every tool enabled unless ``tools`` says otherwise."""
    options.setdefault("tools", TOOL_NAMES)
    return ToolEnv(**options)
