"""``grpolab eval`` and ``grpolab models import``: measure a model directory or a run's model; import one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable


def eval_command(model: str, *, task: str | None = None, task_option: list[str] = (), n: int | None = None,
                 samples: int | None = None, temperature: float | None = None, max_new_tokens: int | None = None,
                 seed: int = 0, completions: str | None = None, examples: int = 3, config: str | None = None,
                 overrides: list[str] = ()) -> int:
    """Greedy accuracy (and sampled accuracy, pass@k) of a model directory or a run's model, as JSON.

    The model is opened with :func:`grpolab.runs.open_run`: a run directory contributes its model
    (:meth:`grpolab.train.rundir.RunDir.model_dir`), its task with its prompt format (chat
    template, system prompt, prompt template) and ``n_eval``, its ``rollout.max_new_tokens`` and,
    for multi-turn runs, its environment (evaluation plays episodes); a bare model directory takes
    them from a training ``config`` (+ ``overrides``), else the defaults, so it is measured with
    the format training will use. ``n`` / ``max_new_tokens`` / ``task`` override them. The
    ``prompts: ...`` line goes to stderr (stdout stays one JSON document). ``completions``: write
    every greedy completion (prompt, completion, reward, reference) as JSON lines (checked for
    writability before the model loads); ``examples``: print a table of that many to stderr.

    Sampled accuracy and pass@k sample as the run (or config) does: ``samples`` defaults to its
    ``rollout.group_size`` and ``temperature`` to its ``rollout.temperature``, with its ``top_p``;
    a ``sampling: ...`` line on stderr and the JSON's ``sampling`` say what was used and where
    each value came from.
    """
    import sys

    import torch

    from grpolab.runs import open_run
    from grpolab.train.checks import check_writable
    from grpolab.train.completions import completion_rows, examples_table, write_jsonl
    from grpolab.measure.evaluate import evaluate

    if completions:  # before the model loads and the evaluation runs, not after
        check_writable(completions, "--completions")
    run = open_run(model, config, overrides, task=task, task_options=task_option, n_eval=n,
                   max_new_tokens=max_new_tokens, log=lambda line: print(line, file=sys.stderr))
    lm, tok, items, mnt = run.model, run.tokenizer, run.eval_items, run.config.rollout.max_new_tokens
    sampling = eval_sampling(run, samples=samples, temperature=temperature, config_given=bool(config or overrides))
    samples, temperature = sampling["samples"], sampling["temperature"]
    print(sampling_line(sampling), file=sys.stderr)
    from grpolab.utils.progress import LineProgress

    def progress(desc):  # one line per ~10% of the items on stderr, with an ETA (stdout stays JSON)
        return LineProgress(len(items), every=max(1, len(items) // 10), desc=desc, unit="item",
                            log=lambda line: print(line, file=sys.stderr)).update

    greedy = evaluate(lm, tok, items, greedy=True, max_new_tokens=mnt, collector=run.collector,
                      progress=progress("eval greedy"))
    report: dict = {"model": str(run.model_dir), "task": run.config.task.name, "items": len(items),
                    "max_new_tokens": mnt, "chat_template": run.prompt_format.chat_template,
                    "greedy_accuracy": greedy.accuracy}
    report["sampling"] = sampling
    if samples > 0:
        sampled = evaluate(lm, tok, items, greedy=False, samples=samples, temperature=temperature,
                           top_p=sampling["top_p"], max_new_tokens=mnt, generator=torch.Generator().manual_seed(seed), collector=run.collector,
                           progress=progress(f"eval sampled x{samples}"))
        report["sampled_accuracy"] = sampled.accuracy
        report["pass_at_k"] = {str(k): v for k, v in sampled.pass_at_k.items()}
    rows = completion_rows(items, run.collector.prompt_texts(items), greedy.completions, greedy.scores,
                           prompt_index=range(len(items)))
    if completions:
        write_jsonl(completions, rows)
        report["completions"] = str(completions)
    print(json.dumps(report, indent=2))
    if examples > 0:
        print(examples_table(rows[:examples]), file=sys.stderr)
    return 0


def eval_sampling(run, *, samples: int | None = None, temperature: float | None = None,
                  config_given: bool = False) -> dict:
    """How ``grpolab eval`` samples: ``{"samples", "temperature", "top_p", "source"}``. Unset values
    come from the opened run's (or config's) rollout settings: ``rollout.group_size`` samples per
    item at ``rollout.temperature`` with ``rollout.top_p``; ``source`` says so (or ``--samples`` /
    ``--temperature`` where given, ``defaults`` for a bare model directory without a config)."""
    ro = run.config.rollout
    origin = ("the run's rollout settings" if run.run_dir is not None else
              "the config's rollout settings" if config_given else "the default rollout settings")
    given = [name for name, v in (("--samples", samples), ("--temperature", temperature)) if v is not None]
    source = origin + (f", {' and '.join(given)} given" if given else "") if len(given) < 2 else " and ".join(given)
    return {"samples": ro.group_size if samples is None else samples,
            "temperature": ro.temperature if temperature is None else temperature,
            "top_p": ro.top_p, "source": source}


def sampling_line(s: dict) -> str:
    """``sampling: 8 samples per item at temperature 0.7, top_p 1.0 (the run's rollout settings)``."""
    if not s["samples"]:
        return "sampling: none (--samples 0: greedy only)"
    return (f"sampling: {s['samples']} sample{'s' if s['samples'] != 1 else ''} per item at temperature "
            f"{s['temperature']:g}, top_p {s['top_p']:g} ({s['source']}; --samples / --temperature override)")


def models_import_command(source: str, *, out: str, dtype: str = "float32", overwrite: bool = False) -> int:
    """``grpolab models import SOURCE --out DIR`` (:func:`grpolab.models.gguf.import_gguf`)."""
    from grpolab.models.gguf import import_gguf
    from grpolab.train.checks import check_writable

    if not (Path(out).exists() and not overwrite):  # (an existing --out is import_gguf's own error)
        check_writable(out, "--out", directory=True)  # before the 30 s load, not after
    import_gguf(source, out, dtype=dtype, overwrite=overwrite)
    return 0
