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


def eval_command(model: str, *, task: str | None = None, task_option: list[str] = (), n: int = 256,
                 samples: int = 8, temperature: float = 1.0, max_new_tokens: int = 48, seed: int = 0) -> int:
    """Greedy accuracy (and sampled accuracy, pass@k) of a model directory or a run's model, as JSON.

    A run directory contributes its model (:meth:`grpolab.train.rundir.RunDir.model_dir`), its
    task and, for multi-turn runs, its environment (evaluation plays episodes).
    """
    import torch

    from grpolab.config import TaskConfig
    from grpolab.models import load_model
    from grpolab.train.evaluate import evaluate
    from grpolab.train.rundir import resolve_model
    from grpolab.train.setup import build_task

    src, run_cfg = resolve_model(model)
    task_cfg = TaskConfig(name=task or "arith", n_eval=n)
    env = None
    if run_cfg is not None and task is None:
        task_cfg = TaskConfig(name=run_cfg.task.name, options=dict(run_cfg.task.options), n_eval=n)
        env = run_cfg.env if run_cfg.env.name else None
    task_cfg.options.update(task_options(list(task_option)))
    lm, tok = load_model(src)
    items = build_task(task_cfg).items("eval", task_cfg.n_eval)
    greedy = evaluate(lm, tok, items, greedy=True, max_new_tokens=max_new_tokens, env=env)
    report: dict = {"model": str(src), "task": task_cfg.name, "items": len(items), "greedy_accuracy": greedy.accuracy}
    if samples > 0:
        sampled = evaluate(lm, tok, items, greedy=False, samples=samples, temperature=temperature,
                           max_new_tokens=max_new_tokens, generator=torch.Generator().manual_seed(seed), env=env)
        report["sampled_accuracy"] = sampled.accuracy
        report["pass_at_k"] = {str(k): v for k, v in sampled.pass_at_k.items()}
    print(json.dumps(report, indent=2))
    return 0


def headroom_command(model: str, *, task: str | None = None, task_option: list[str] = (), n: int = 256,
                     k: int = 8, temperature: float | None = None, max_new_tokens: int | None = None,
                     seed: int = 0, out: str | None = None) -> int:
    """Greedy vs sampled success and pass@k, with a verdict (see :mod:`grpolab.train.headroom`)."""
    from grpolab.train.headroom import headroom_command as run

    res = run(model, task=task, task_options=list(task_option), n=n, k=k, temperature=temperature,
              max_new_tokens=max_new_tokens, seed=seed, out=out)
    print(res.message)
    return 0
