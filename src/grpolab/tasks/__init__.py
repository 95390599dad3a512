"""grpolab.tasks: seeded, deterministic problem sources that yield :class:`TaskItem` lists.

* :class:`TaskItem` -- prompt, reference answer, privileged context, reward name,
  demonstration, meta (+ reward options); ``item.score(completion)`` never raises.
* :class:`Task` protocol -- ``name`` and ``items(split, n)``, ``split`` in ("train", "eval"),
  disjoint by prompt.
* :class:`PromptFormat` -- chat template (``auto | on | off``), system prompt and prompt
  template: how an item (or a TRL conversation in ``item.messages``) becomes prompt token ids.
* registry -- :func:`register_task`, :func:`get_task`, :func:`list_tasks`.
* built-in tasks: "arith" (:class:`ArithTask`, the tiny model's default), "reverse"
  (:class:`ReverseTask`), "pairsum" (:class:`PairSumTask`, a search whose failures run long), "dataset" (:func:`load_dataset_task` for .jsonl/.json/.parquet),
  "reasoning_gym" (:class:`ReasoningGymTask`), "short_arith" (:class:`ShortArithTask`, a sum asked
  in words with a one-number answer, for small pretrained instruct models); the verifier families
  for small instruct models: "short_code" (:class:`ShortCodeTask`, a Python function checked by
  hidden tests in the sandbox), "short_sql" (:class:`ShortSQLTask`, one SELECT over a small SQLite
  database) and "short_json" (:class:`ShortJSONTask`, fields extracted into a JSON object that fits
  a schema), each with levels, demonstrations and privileged solution or documents; multi-turn tasks for :mod:`grpolab.envs`:
  "tool_arith" (:class:`ToolArithTask`), "web" (:class:`WebTask`) and "miniwob"
  (:class:`MiniWoBTask`, real MiniWoB++ pages; needs ``grpolab[miniwob]`` and a browser).
"""

from grpolab.tasks.arith import ArithTask
from grpolab.tasks.base import (
    PROCEDURAL_DEFAULT_N,
    SPLITS,
    ProceduralTask,
    StaticTask,
    Task,
    TaskItem,
    TooFewItems,
    get_task,
    list_tasks,
    prompt_in_eval,
    register_task,
    split_by_prompt,
)
from grpolab.tasks.dataset import DatasetTask, JsonlTask, load_dataset_task, split_final_answer
from grpolab.tasks.prompt import CHAT_TEMPLATE_MODES, PromptFormat, check_messages
from grpolab.tasks.miniwob import MiniWoBTask
from grpolab.tasks.pairsum import PairSumTask
from grpolab.tasks.reasoning_gym import DEFAULT_RG_TEMPLATE, ReasoningGymTask
from grpolab.tasks.reverse import ReverseTask
from grpolab.tasks.short_arith import ShortArithTask
from grpolab.tasks.short_code import ShortCodeTask
from grpolab.tasks.short_json import ShortJSONTask
from grpolab.tasks.short_sql import ShortSQLTask
from grpolab.tasks.tool_arith import ToolArithTask
from grpolab.tasks.web import WebTask

__all__ = [
    "ArithTask",
    "CHAT_TEMPLATE_MODES",
    "PROCEDURAL_DEFAULT_N",
    "PromptFormat",
    "TooFewItems",
    "check_messages",
    "split_final_answer",
    "DEFAULT_RG_TEMPLATE",
    "DatasetTask",
    "JsonlTask",
    "MiniWoBTask",
    "PairSumTask",
    "ProceduralTask",
    "ReasoningGymTask",
    "ReverseTask",
    "ShortArithTask",
    "ShortCodeTask",
    "ShortJSONTask",
    "ShortSQLTask",
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
