"""A task verl can train on CPU: grpolab's ``arith`` task, the tiny model, and a verl reward function.

- :func:`write_tiny_model` saves grpolab's tiny Llama (a seeded, untrained one by default) with
  its character tokenizer and :data:`CHAT_TEMPLATE` as a Hugging Face directory verl can load;
  :func:`add_chat_template` gives an existing one (a ``grpolab sft`` warm start) the template.
- :func:`write_arith_parquet` writes verl's RL-dataset rows (``prompt`` as chat messages,
  ``reward_model.ground_truth``, ``extra_info.solution`` = the worked solution, the privileged
  text RLSD / GEAR read) for items of grpolab's task.
- :func:`compute_score` is verl's custom reward function
  (``reward.custom_reward_function.path=<this file> reward.custom_reward_function.name=compute_score``):
  grpolab's own ``math`` reward of the task, so verl and grpolab's trainer score alike.

Nothing is downloaded; verl is not imported here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

#: Renders a chat as the plain prompt grpolab's own trainer gives the tiny model: ``<bos>`` and the
#: messages' text (the tiny model is warm-started on plain prompts such as ``"7+5-3="``).
CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
#: The teacher prompt of RLSD / GEAR on this task (``grpolab.credit.chat_template``): grpolab's
#: plain-text default, in the tiny tokenizer's alphabet.
TEACHER_TEMPLATE = "{prompt}\nhere is a reference solution: {privileged}\nsolve it in your own way.\n{prompt}"
DATA_SOURCE = "grpolab/arith"


def add_chat_template(model_dir: str | os.PathLike) -> None:
    """Give the tokenizer of ``model_dir`` :data:`CHAT_TEMPLATE` (rewrites its tokenizer files)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(model_dir))


def write_tiny_model(out: str | os.PathLike, *, seed: int = 0, hidden_size: int = 32, num_layers: int = 2,
                     num_heads: int = 2, intermediate_size: int = 64) -> Path:
    """Save a seeded tiny Llama (default ~31 K parameters) + tokenizer + chat template to ``out``."""
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    out = Path(out)
    tok = build_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    cfg = TinyModelConfig(hidden_size=hidden_size, num_hidden_layers=num_layers, num_attention_heads=num_heads,
                          intermediate_size=intermediate_size)
    model = build_tiny_model(tok, cfg, seed=seed)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


def arith_items(split: str, n: int, *, seed: int = 0, **options: Any):
    """``n`` items of grpolab's ``arith`` task (``split``: train | eval)."""
    from grpolab.tasks import get_task

    return get_task("arith", seed=seed, **options).items(split, n)


def write_arith_parquet(path: str | os.PathLike, items: Sequence[Any], *, split: str = "train") -> Path:
    """verl RL-dataset rows for ``items`` (grpolab ``TaskItem``s), written atomically to ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "user", "content": it.prompt}],
        "ability": "arith",
        "reward_model": {"style": "rule", "ground_truth": it.reference},
        "extra_info": {"index": i, "split": split, "solution": it.privileged or it.reference},
    } for i, it in enumerate(items)]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(pa.Table.from_pylist(rows), str(tmp))
    os.replace(tmp, path)
    return path


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                  **kwargs: Any) -> float:
    """verl's reward-function signature: grpolab's ``math`` reward of the response (1.0 or 0.0)."""
    from grpolab.rewards.base import score

    return float(score("math", solution_str, str(ground_truth)).score)


def compute_partial_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Any = None,
                          **kwargs: Any) -> float:
    """A graded reward for an untrained model: the share of the worked solution's characters the
    response gets right, position by position (``extra_info['solution']``, else the answer).

    The 2-step end-to-end tests use it so that a group's rewards differ (non-zero advantages and
    gradients) even before any learning; the learning measurement uses :func:`compute_score`.
    """
    target = str((extra_info or {}).get("solution") or ground_truth)
    hits = sum(a == b for a, b in zip(solution_str, target))
    return hits / max(len(target), len(solution_str), 1)
