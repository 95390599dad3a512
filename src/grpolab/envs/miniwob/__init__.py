"""MiniWoB++ in a real headless browser: the "miniwob" environment (extra ``grpolab[miniwob]``).

* :class:`MiniWoBEnv` -- registered as ``env.name: miniwob``; ``click(ID)`` / ``type(ID,"TEXT")``
  on real MiniWoB++ pages, the task's own raw reward mapped to success 1 / failure 0.
* :class:`MiniWoBPool` -- long-lived browsers in a loopback-only network namespace, recycled,
  always closed; :func:`shared_pool`, :func:`browser_status` (why a browser cannot run here).
* :mod:`~grpolab.envs.miniwob.render` -- the page as text and the action parser (pure).
* :mod:`~grpolab.envs.miniwob.experts` -- scripted experts (:data:`SUPPORTED_TASKS`).

The items come from :class:`grpolab.tasks.miniwob.MiniWoBTask` (``task.name: miniwob``). Setup,
the text format, speed and what differs from the published protocol: ``docs/miniwob.md``.
Importing this package needs neither selenium nor a browser; starting a pool does.
"""

from grpolab.envs.miniwob.env import ENV_STATS, EnvStats, MiniWoBEnv, observation_text
from grpolab.envs.miniwob.experts import SUPPORTED_TASKS, expert_action
from grpolab.envs.miniwob.pool import (
    BrowserUnavailable,
    MiniWoBError,
    MiniWoBPool,
    browser_status,
    find_browser,
    namespace_prefix,
    shared_pool,
)
from grpolab.envs.miniwob.render import (
    Action,
    ActionError,
    Element,
    decode_case,
    encode_case,
    flatten_dom,
    parse_action,
    render_observation,
)

__all__ = [
    "ENV_STATS",
    "SUPPORTED_TASKS",
    "Action",
    "ActionError",
    "BrowserUnavailable",
    "Element",
    "EnvStats",
    "MiniWoBEnv",
    "MiniWoBError",
    "MiniWoBPool",
    "browser_status",
    "decode_case",
    "encode_case",
    "expert_action",
    "find_browser",
    "flatten_dom",
    "namespace_prefix",
    "observation_text",
    "parse_action",
    "render_observation",
    "shared_pool",
]
