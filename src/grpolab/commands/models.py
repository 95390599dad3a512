"""``grpolab eval`` and ``grpolab headroom``: measure a model directory or a run's model."""

from __future__ import annotations

import json

from grpolab.config import ConfigError


def task_options(pairs: list[str]) -> dict:
    """``["k=v", ...]`` (``--task-option``) as a mapping with YAML values."""
    import yaml

    out = {}
    for kv in pairs:
        if "=" not in kv:
            raise ConfigError(f"--task-option {kv!r} must look like KEY=VALUE")
        k, v = kv.split("=", 1)
        out[k] = yaml.safe_load(v)
    return out


def eval_command(model: str, *, task: str | None = None, task_option: list[str] = (), n: int | None = None,
                 samples: int = 8, temperature: float = 1.0, max_new_tokens: int | None = None, seed: int = 0,
                 completions: str | None = None, examples: int = 3) -> int:
    """Greedy accuracy (and sampled accuracy, pass@k) of a model directory or a run's model, as JSON.

    A run directory contributes its model (:meth:`grpolab.train.rundir.RunDir.model_dir`), its
    task with its prompt format (chat template, system prompt, prompt template) and ``n_eval``,
    its ``rollout.max_new_tokens`` and, for multi-turn runs, its environment (evaluation plays
    episodes); ``n`` / ``max_new_tokens`` / ``task`` override them. ``completions``: write every
    greedy completion (prompt, completion, reward, reference) as JSON lines; ``examples``: print a
    table of that many to stderr (stdout stays one JSON document).
    """
    import dataclasses
    import sys

    import torch

    from grpolab.config import TaskConfig
    from grpolab.models import load_model, stop_token_ids
    from grpolab.train.completions import completion_rows, examples_table, write_jsonl
    from grpolab.train.evaluate import evaluate
    from grpolab.train.rundir import resolve_model
    from grpolab.train.setup import build_task

    src, run_cfg = resolve_model(model)
    task_cfg = TaskConfig(name=task or "arith", n_eval=n)
    env = None
    model_path = src  # decides task.chat_template=auto (an instruct model's directory name)
    if run_cfg is not None:
        if task is None:
            task_cfg = dataclasses.replace(run_cfg.task, options=dict(run_cfg.task.options),
                                           n_eval=run_cfg.task.n_eval if n is None else n)
            env = run_cfg.env if run_cfg.env.name else None
        if max_new_tokens is None:
            max_new_tokens = run_cfg.rollout.max_new_tokens
        model_path = run_cfg.model.path or src  # the same chat-template decision as in training
    max_new_tokens = 48 if max_new_tokens is None else max_new_tokens
    task_cfg.options.update(task_options(list(task_option)))
    try:
        lm, tok = load_model(src)
    except (FileNotFoundError, NotADirectoryError, ValueError, OSError) as e:
        raise ConfigError(f"{src}: {e}") from None
    from grpolab.tasks import TooFewItems

    try:
        items = build_task(task_cfg).items("eval", task_cfg.n_eval)
    except TooFewItems as e:
        raise ConfigError(f"{e} (--n {e.available}, or leave --n unset for all rows)") from None
    try:
        fmt = task_cfg.prompt_format().resolve(tok, model_path=model_path,
                                               conversational=any(it.messages for it in items))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    from grpolab.train.collector import make_collector

    def collector():
        return make_collector(tok, max_new_tokens=max_new_tokens, env=env, prompt_format=fmt,
                              stop_ids=stop_token_ids(lm, tok))

    greedy = evaluate(lm, tok, items, greedy=True, max_new_tokens=max_new_tokens, env=env, collector=collector())
    report: dict = {"model": str(src), "task": task_cfg.name, "items": len(items), "max_new_tokens": max_new_tokens,
                    "chat_template": fmt.chat_template, "greedy_accuracy": greedy.accuracy}
    if samples > 0:
        sampled = evaluate(lm, tok, items, greedy=False, samples=samples, temperature=temperature,
                           max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed), env=env,
                           collector=collector())
        report["sampled_accuracy"] = sampled.accuracy
        report["pass_at_k"] = {str(k): v for k, v in sampled.pass_at_k.items()}
    rows = completion_rows(items, collector().prompt_texts(items), greedy.completions, greedy.scores, group_size=1)
    if completions:
        write_jsonl(completions, rows)
        report["completions"] = str(completions)
    print(json.dumps(report, indent=2))
    if examples > 0:
        print(examples_table(rows[:examples]), file=sys.stderr)
    return 0


def headroom_command(model: str, *, task: str | None = None, task_option: list[str] = (), n: int | None = None,
                     k: int = 8, temperature: float | None = None, max_new_tokens: int | None = None,
                     seed: int = 0, out: str | None = None, config: str | None = None,
                     overrides: list[str] = ()) -> int:
    """Greedy vs sampled success and pass@k, with a verdict (see :mod:`grpolab.train.headroom`)."""
    from grpolab.train.headroom import headroom_command as run

    res = run(model, task=task, task_options=list(task_option), n=n, k=k, temperature=temperature,
              max_new_tokens=max_new_tokens, seed=seed, out=out, config=config, overrides=list(overrides))
    print(res.message)
    return 0
