"""grpolab.envs: multi-turn text environments (tool calling, text web pages).

* :class:`Env` protocol -- ``reset(item) -> prompt``, ``step(action) -> StepResult``.
* registry -- :func:`register_env`, :func:`make_env`, :func:`list_envs`.
* built-in environments: "tool_arith" and "tools" (:class:`ToolEnv`: calculator, sandboxed
  Python, read-only SQL), "web" (:class:`WebEnv`, MiniWoB-style text pages), "miniwob"
  (:class:`MiniWoBEnv`: real MiniWoB++ pages in a headless browser; ``docs/miniwob.md``).
* tools -- :class:`CalcTool`, :class:`PythonTool`, :class:`SqlTool`.

The action and observation format is documented in :mod:`grpolab.envs.base` and ``docs/envs.md``;
the episode runner that batches episodes over a model is :func:`grpolab.rollout.run_episodes`.
The procedural tasks that feed these environments are ``grpolab.tasks.tool_arith`` and
``grpolab.tasks.web``.
"""

from grpolab.envs.base import (
    ENVS,
    Env,
    StepResult,
    format_observation,
    list_envs,
    make_env,
    parse_call,
    register_env,
    run_script,
    step_envs,
)
from grpolab.envs.miniwob import MiniWoBEnv
from grpolab.envs.tool_env import ToolEnv, answers_match
from grpolab.envs.tools import CalcTool, PythonTool, SqlTool, ToolOutput, safe_arith
from grpolab.envs.web import WebEnv, render_page, web_expert

__all__ = [
    "ENVS",
    "CalcTool",
    "Env",
    "MiniWoBEnv",
    "PythonTool",
    "SqlTool",
    "StepResult",
    "ToolEnv",
    "ToolOutput",
    "WebEnv",
    "answers_match",
    "format_observation",
    "list_envs",
    "make_env",
    "parse_call",
    "register_env",
    "render_page",
    "run_script",
    "safe_arith",
    "step_envs",
    "web_expert",
]
