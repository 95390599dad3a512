"""grpolab.tasks: seeded, deterministic problem sources that yield :class:`TaskItem` lists.

* :class:`TaskItem` -- prompt, reference answer, privileged context, reward name,
  demonstration, meta (+ reward options); ``item.score(completion)`` never raises.
* :class:`Task` protocol -- ``name`` and ``items(split, n)``, ``split`` in ("train", "eval"),
  disjoint by prompt.
* registry -- :func:`register_task`, :func:`get_task`, :func:`list_tasks`.
* built-in tasks: "arith" (:class:`ArithTask`, the tiny model's default), "reverse"
  (:class:`ReverseTask`), "dataset" (:func:`load_dataset_task` for .jsonl/.json/.parquet),
  "reasoning_gym" (:class:`ReasoningGymTask`); multi-turn tasks for :mod:`grpolab.envs`:
  "tool_arith" (:class:`ToolArithTask`), "web" (:class:`WebTask`) and "miniwob"
  (:class:`MiniWoBTask`, real MiniWoB++ pages; needs ``grpolab[miniwob]`` and a browser).
"""

from grpolab.tasks.arith import ArithTask
from grpolab.tasks.base import (
    SPLITS,
    ProceduralTask,
    StaticTask,
    Task,
    TaskItem,
    get_task,
    list_tasks,
    prompt_in_eval,
    register_task,
    split_by_prompt,
)
from grpolab.tasks.dataset import DatasetTask, JsonlTask, load_dataset_task
from grpolab.tasks.miniwob import MiniWoBTask
from grpolab.tasks.reasoning_gym import DEFAULT_RG_TEMPLATE, ReasoningGymTask
from grpolab.tasks.reverse import ReverseTask
from grpolab.tasks.tool_arith import ToolArithTask
from grpolab.tasks.web import WebTask

__all__ = [
    "ArithTask",
    "DEFAULT_RG_TEMPLATE",
    "DatasetTask",
    "JsonlTask",
    "MiniWoBTask",
    "ProceduralTask",
    "ReasoningGymTask",
    "ReverseTask",
    "ToolArithTask",
    "WebTask",
    "SPLITS",
    "StaticTask",
    "Task",
    "TaskItem",
    "get_task",
    "list_tasks",
    "load_dataset_task",
    "prompt_in_eval",
    "register_task",
    "split_by_prompt",
]
