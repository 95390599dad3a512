"""The supervised warm start's room: when to build it, where it is kept, and how it resumes.

- :func:`warm_start` (``grpolab train``: ``RUN_DIR/sft``) and :func:`build_warm_start`
  (``grpolab sft --out OUT``) run :func:`grpolab.train.sft.run_sft` with the frozen
  :class:`~grpolab.train.sft.SFTSpec` of the run's config, its accuracy checks through the run's
  collector (prompt format, stop tokens), and write the model with its ``sft.json`` record.
- The cache is keyed on the settings that produced it (:func:`warm_start_key`): a cache built with
  other settings is rebuilt, never silently reused (:func:`warm_start_status`); a killed warm start
  continues from its in-progress checkpoint when it is run again with the same settings
  (:class:`WarmStartCheckpoint`, in ``OUT.partial``); snapshots stay in ``OUT.snapshots``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from grpolab.config import Config, ConfigError
from grpolab.train.checkpoint import latest_checkpoint, load_weights, remove_stale_temporaries, save_checkpoint
from grpolab.train.rundir import RunDir, config_differences, in_progress_dir, snapshots_dir
from grpolab.train.sft import SFTSpec, run_sft

__all__ = ["WarmStartCheckpoint", "build_warm_start", "sft_from_config", "sft_selection_split", "warm_start",
           "warm_start_key", "warm_start_status", "write_sft_record"]


_NOT_WARM_START_MODEL = ("device", "lora", "lora_save", "attn_implementation", "gradient_checkpointing")
_NOT_WARM_START_TASK = ("chat_template", "system_prompt", "prompt_template")
_NOT_WARM_START_SFT = ("save_every", "snapshot_every")
#: The default prompt settings: a key without a ``prompt_format`` entry means these (so warm starts
#: cached before the checks used the run's prompt format keep matching).
_PLAIN_FORMAT = {"chat_template": "auto", "system_prompt": "", "prompt_template": "{prompt}"}


def warm_start_key(cfg: Config) -> dict[str, Any]:
    """The settings that produce a run's warm start: model (but its device), task, sft, seed, eval length, env."""
    # LoRA is added after the warm start, and attention kernels / checkpointing do not change what
    # the warm start learns: they are not part of the key; the prompt format is (when not the
    # default), since the warm start's accuracy checks, which decide when it stops, use it;
    # nor is how often it checkpoints (a resumed warm start is bit-identical to an uninterrupted one)
    # or keeps snapshots
    model = {k: v for k, v in dataclasses.asdict(cfg.model).items() if k not in _NOT_WARM_START_MODEL}
    task = {k: v for k, v in dataclasses.asdict(cfg.task).items() if k not in _NOT_WARM_START_TASK}
    sft = {k: v for k, v in dataclasses.asdict(cfg.sft).items() if k not in _NOT_WARM_START_SFT}
    key = {"model": model, "task": task, "sft": sft,
           "seed": cfg.trainer.seed, "max_new_tokens": cfg.rollout.max_new_tokens,
           "env": dataclasses.asdict(cfg.env)}
    prompt_format = {k: getattr(cfg.task, k) for k in _NOT_WARM_START_TASK}
    if prompt_format != _PLAIN_FORMAT:  # the warm start's accuracy checks prompt in the run's format
        key["prompt_format"] = prompt_format
    if cfg.sft.privileged_share > 0:  # the teacher-template share was rendered in credit.template
        key["teacher_template"] = cfg.credit.template
    t = cfg.task
    may_chat = bool(cfg.model.path) and t.chat_template != "off"  # the tiny default model has no template
    if not cfg.env.name and (may_chat or t.system_prompt or t.prompt_template != "{prompt}"):
        # the demonstrations are shown in the run's prompt format (chat template, system prompt),
        # not as plain text as before: a warm start cached by an earlier grpolab is not reused
        key["demonstrations"] = "in the run's prompt format"
        if cfg.sft.privileged_share > 0:
            c = cfg.credit
            key["teacher_chat"] = {"chat_template": c.chat_template, "system_template": c.system_template,
                                   "privileged_placement": c.privileged_placement}
    return key



def warm_start_status(model_dir: str | os.PathLike, cfg: Config) -> tuple[str, list[str]]:
    """``(status, differences)`` of the finished warm start in ``model_dir`` for ``cfg``.

    ``status``: "missing" (none), "incomplete" (a model without its ``sft.json`` record: the
    writer was killed), "legacy" (a record without a settings key: an older grpolab),
    "match" or "differs" (``differences`` lists ``key: old -> new``, :func:`warm_start_key`).
    """
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").exists():
        return "missing", []  # (a killed warm start's OUT.partial/ is resumed by the warm start itself)
    try:
        saved = json.loads((model_dir / "sft.json").read_text())
    except (OSError, ValueError):
        return "incomplete", []
    if not isinstance(saved, dict) or saved.get("key") is None:
        return "legacy", []
    diffs = config_differences(saved["key"], json.loads(json.dumps(warm_start_key(cfg))))
    return ("match", []) if not diffs else ("differs", diffs)



class WarmStartCheckpoint:
    """The in-progress checkpoint of one supervised warm start, and whether it may be resumed.

    It lives in :func:`in_progress_dir` of the warm start's final output and is written every
    ``sft.save_every`` steps (unset: at each check, every ``sft.eval_every`` steps; 0: never) by
    :func:`grpolab.train.checkpoint.save_checkpoint`, atomically and in the RL checkpoints' layout
    (``OUT.partial/checkpoints/step_N/{model/, state.pt}`` + ``latest``; only the newest kept).
    ``state.pt`` holds :meth:`grpolab.train.sft.SFTState.state_dict` and the settings key
    (:func:`warm_start_key`). The caller removes it once the final output is complete.

    A checkpoint made with other settings is not resumed: the warm start starts over (and says so,
    naming the settings that changed), exactly as the finished warm-start cache is rebuilt rather
    than reused (:func:`warm_start_status`). It is replaced at the new run's first save.
    """

    def __init__(self, out: str | os.PathLike, cfg: Config, *, log: Callable[[str], None] = print) -> None:
        self.path = in_progress_dir(out)
        self.key = json.loads(json.dumps(warm_start_key(cfg)))  # as it reads back: tuples -> lists
        self.save_every = cfg.sft.eval_every if cfg.sft.save_every is None else cfg.sft.save_every
        self.snapshot_every = cfg.sft.snapshot_every
        self.snapshots = snapshots_dir(out)
        self.log = log

    def __repr__(self) -> str:
        return f"WarmStartCheckpoint({str(self.path)!r}, save_every={self.save_every})"

    def load(self, model) -> dict[str, Any] | None:
        """Load the newest checkpoint's weights into ``model`` and return its warm-start state;
        None (the warm start starts from scratch) when there is none or it was made with other
        settings. Temporary folders of a writer that was killed are removed first."""
        remove_stale_temporaries(self.path / "checkpoints")
        self._drop_other_snapshots()
        ckpt = latest_checkpoint(self.path)
        if ckpt is None:
            return None
        saved = ckpt.load_state()
        diffs = config_differences(saved.get("key"), self.key)
        if diffs:
            self.log(f"warm start: {self.path} was made with other settings ({'; '.join(diffs[:3])}); "
                     "starting the warm start over with these settings")
            return None
        model.load_state_dict(load_weights(ckpt.model_dir, model))
        self.log(f"warm start: resuming from its in-progress checkpoint {ckpt.path} (step {ckpt.step})")
        return saved["sft"]

    def save(self, step: int, model, tokenizer, state: dict[str, Any]) -> None:
        """Write step ``step``'s checkpoint (atomic) and drop the one before it."""
        save_checkpoint(self.path, step, model, tokenizer, {"key": self.key, "sft": state}, keep=1)

    def _drop_other_snapshots(self) -> None:
        """Remove snapshots made with other settings (they would pass for this warm start's)."""
        if not self.snapshots.is_dir():
            return
        for d in sorted(self.snapshots.glob("step_*")):
            try:
                key = json.loads((d / "snapshot.json").read_text()).get("key")
            except (OSError, ValueError):
                key = None
            if config_differences(key, self.key):
                self.log(f"warm start: removing {d}, a snapshot made with other settings")
                shutil.rmtree(d, ignore_errors=True)

    def snapshot(self, step: int, model, tokenizer, info: dict[str, Any]) -> Path:
        """Keep the model as of ``step`` (HF format, atomic) in ``OUT.snapshots/step_N`` with
        ``snapshot.json`` (``info``: step, and the check's accuracy when there was one at that step).
        Unlike the in-progress checkpoint it stays after the warm start ends."""
        from grpolab.models import save_model
        from grpolab.utils.io import atomic_write_json

        path = save_model(model, tokenizer, self.snapshots / f"step_{step:06d}")
        atomic_write_json(path / "snapshot.json", {**info, "key": self.key})
        return path

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)



def warm_start(cfg: Config, model, tokenizer, from_scratch: bool, train_items, eval_items,
               run_dir, *, log: Callable[[str], None] = print, collector=None):
    """Supervised warm start, once per run directory (cached in ``RUN_DIR/sft``).

    The cache is reused only when it was built with the same settings
    (:func:`warm_start_key`: model, task, sft section, seed, ...); with
    other settings it is rebuilt. A cache from an older grpolab without a settings record is
    reused as it is (and said so). While it trains, the warm start checkpoints to
    ``RUN_DIR/sft.partial`` (``sft.save_every``); a killed one continues from there when the run
    is started again with the same settings. ``collector``: the run's collector, through which
    the warm start's accuracy checks prompt the model (its prompt format and stop tokens).
    """
    enabled = cfg.sft.enabled == "yes" or (cfg.sft.enabled == "auto" and from_scratch)
    if not enabled:
        return model
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    status, diffs = warm_start_status(rd.sft, cfg)
    if status in ("match", "legacy"):
        from grpolab.models import load_model

        log(f"warm start: reusing {rd.sft}" + (" (no settings record: built by an older grpolab)"
                                               if status == "legacy" else ""))
        cached, _ = load_model(rd.sft, device=next(model.parameters()).device)
        model.load_state_dict(cached.state_dict())
        shutil.rmtree(rd.sft_in_progress, ignore_errors=True)  # left if killed just after sft/ was complete
        return model
    if status == "differs":
        log(f"warm start: {rd.sft} was built with other settings ({'; '.join(diffs[:3])}); rebuilding it")
    elif status == "incomplete":
        log(f"warm start: {rd.sft} has no sft.json record (its writer was interrupted); rebuilding it")
    where = "validation items held out of the training split" if cfg.sft.select_on == "validation" \
        else "held-out items"
    log(f"warm start: supervised training on demonstrations until greedy accuracy on {where} >= "
        f"{cfg.sft.target_accuracy:.2f} (at most {cfg.sft.max_steps} steps)")
    build_warm_start(cfg, model, tokenizer, train_items, eval_items, rd.sft, log=log, collector=collector)
    return model


def build_warm_start(cfg: Config, model, tokenizer, train_items, eval_items, out, *,
                     log: Callable[[str], None] = print, collector=None):
    """Run the warm start (model trained in place) and write it to ``out`` with its ``sft.json``.

    ``grpolab sft --out OUT`` and ``grpolab train`` (``RUN_DIR/sft``) both come here. Progress is
    checkpointed to the sibling ``OUT.partial`` (:class:`WarmStartCheckpoint`)
    and resumed from there by a later call with the same settings; it is removed once ``out``
    and its record are complete. Returns ``(final_path, SFTResult)``.
    """
    from grpolab.models import save_model

    checkpoint = WarmStartCheckpoint(out, cfg, log=log)
    result = sft_from_config(cfg, model, tokenizer, train_items, eval_items, log=log, checkpoint=checkpoint,
                             collector=collector)
    t0 = time.time()
    saved = save_model(model, tokenizer, out)
    write_sft_record(saved, cfg, result, result.seconds + time.time() - t0)
    checkpoint.remove()
    return saved, result


def sft_from_config(cfg: Config, model, tokenizer, train_items, eval_items, *,
                    log: Callable[[str], None] = print, checkpoint=None, collector=None):
    """Run the supervised warm start with the ``sft`` section of ``cfg`` (model trained in place).

    ``checkpoint``: where to keep and find its in-progress checkpoint
    (:class:`WarmStartCheckpoint`); None: no checkpoints. ``collector``: the
    run's collector for the accuracy checks (:func:`grpolab.train.sft.run_sft`)."""
    demos, select_items = sft_selection_split(cfg, train_items, eval_items)
    try:
        spec = SFTSpec.from_config(cfg, prompt_format=getattr(collector, "prompt_format", None))
    except ValueError as e:
        raise ConfigError(f"sft: {e}") from None
    return run_sft(model, tokenizer, demos, select_items, spec, log=log, checkpoint=checkpoint, collector=collector)


def sft_selection_split(cfg: Config, train_items, eval_items):
    """``(demonstration_items, selection_items)`` for the warm start, per ``sft.select_on``.

    "validation": the last ``sft.n_eval`` training items (at most a quarter of them) are held out
    of the demonstrations and decide when to stop, so the held-out test set that measures RL's gain
    plays no part in choosing the warm start. "heldout": train on every training item and stop on
    the first ``sft.n_eval`` held-out items.
    """
    if cfg.sft.select_on == "heldout":
        return list(train_items), list(eval_items[: cfg.sft.n_eval])
    n_val = min(cfg.sft.n_eval, len(train_items) // 4)
    if n_val < 1:
        raise ConfigError(
            f"sft.select_on=validation holds out a quarter of the training items to decide when the "
            f"warm start stops, but the task has only {len(train_items)} training item(s); raise "
            f"task.n_train or set sft.select_on=heldout"
        )
    return list(train_items[:-n_val]), list(train_items[-n_val:])


def write_sft_record(model_dir: Path, cfg: Config, result, seconds: float) -> None:
    """``MODEL_DIR/sft.json``: steps, accuracy, the check history, the ``sft`` settings used and
    the warm-start key (the settings that produced it; see :func:`warm_start_key`)."""
    from grpolab.utils.io import atomic_write_json

    atomic_write_json(Path(model_dir) / "sft.json", {
        "steps": result.steps, "accuracy": result.accuracy, "history": result.history,
        "seconds": seconds, "resumed_from": result.resumed_from,
        "sft_config": dataclasses.asdict(cfg.sft), "key": warm_start_key(cfg),
    })

