"""Issue 46: a prompt-length limit checked before any work (rollout.max_prompt_tokens, never above
the model's context less rollout.max_new_tokens) with verl's truncation policies error/left/right.

A 6,000-character dataset row used to grow the process until the OOM killer ended it, with no
message; now it is one error line before the model trains (or a truncated prompt, when asked)."""

from __future__ import annotations

import pytest

from grpolab.cli import main
from grpolab.config import ConfigError, load_config
from grpolab.rollout.prompts import prompt_limit, truncate_prompt
from grpolab.tasks.base import TaskItem

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "sft.enabled=no", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
    "trainer.steps=1", "trainer.preflight=false", "log.progress=false", "log.plots=false",
]


def _sets(*values):
    return sum([["--set", v] for v in values], [])


def _dataset(tmp_path, long_chars: int):
    rows = [f'{{"prompt": "{i}+1=", "answer": "{i + 1}"}}\n' for i in range(8)]
    rows.insert(3, '{"prompt": "' + "1+" * (long_chars // 2) + '1=", "answer": "0"}\n')
    path = tmp_path / "d.jsonl"
    path.write_text("".join(rows))
    return path


def test_a_long_dataset_row_is_one_error_before_any_work(tmp_path, capsys):
    data, run = _dataset(tmp_path, 6000), tmp_path / "run"
    rc = main(["train", *_sets(*SMALL, "task.name=dataset", f"task.options.path={data}",
                                f"trainer.run_dir={run}")])
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert f"longer than the limit, the longest row 3 of {data}" in lines[0]
    assert "rollout.max_prompt_tokens" in lines[0] and "rollout.prompt_truncation=left" in lines[0]
    assert not (run / "config.yaml").exists()  # nothing half-written: the run never started
    # --dry-run runs the same check
    rc = main(["train", "--dry-run", *_sets(*SMALL, "task.name=dataset", f"task.options.path={data}",
                                            f"trainer.run_dir={run}")])
    assert rc == 2 and "longer than the limit" in capsys.readouterr().err


def test_left_and_right_truncation_keep_the_end_or_the_start(tmp_path):
    from grpolab.models.tokenizer import build_tokenizer
    from grpolab.train.setup import resolve_prompt_format

    tok = build_tokenizer()
    items = [TaskItem(prompt="1+" * 100 + "1=", reference="0"), TaskItem(prompt="2+2=", reference="4")]
    full = load_config(overrides=["task.chat_template=off"]).task.prompt_format().resolve(tok).encode(items, tok)
    logged = []
    for side in ("left", "right"):
        cfg = load_config(overrides=["task.chat_template=off", "rollout.max_prompt_tokens=40",
                                     f"rollout.prompt_truncation={side}"])
        fmt = resolve_prompt_format(cfg, tok, items, log=logged.append, context=512)
        long_ids, short_ids = fmt.encode(items, tok)
        assert len(long_ids) == 40 and short_ids == full[1]
        assert long_ids == (full[0][-40:] if side == "left" else full[0][:40])
    assert any("1 of 2 longer than 40 tokens are cut" in line for line in logged)


def test_the_limit_never_exceeds_the_models_context(tmp_path):
    from grpolab.models.tokenizer import build_tokenizer
    from grpolab.train.setup import resolve_prompt_format

    assert prompt_limit(512, 48, 512) == 464 and prompt_limit(0, 48, 512) == 464
    assert prompt_limit(100, 48, 512) == 100 and prompt_limit(0, 48, None) == 0
    with pytest.raises(ValueError, match="leaves no room for a prompt"):
        prompt_limit(0, 600, 512)
    tok = build_tokenizer()
    items = [TaskItem(prompt="1+" * 300 + "1=", reference="0")]
    cfg = load_config(overrides=["task.chat_template=off", "rollout.max_prompt_tokens=4096"])
    with pytest.raises(ConfigError) as e:
        resolve_prompt_format(cfg, tok, items, context=512)
    assert "capped at the model's context of 512 tokens less rollout.max_new_tokens=48" in str(e.value)


def test_truncate_prompt_policies():
    ids = list(range(10))
    assert truncate_prompt(ids, 0) == ids and truncate_prompt(ids, 10) == ids
    assert truncate_prompt(ids, 4, "left") == [6, 7, 8, 9] and truncate_prompt(ids, 4, "right") == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="10 tokens, longer than the limit of 4"):
        truncate_prompt(ids, 4)


def test_episodes_are_not_limited_here():
    """With env.name set, the environment writes the prompts (episodes): the item check skips the limit."""
    from grpolab.models.tokenizer import build_tokenizer
    from grpolab.train.setup import resolve_prompt_format

    tok = build_tokenizer()
    items = [TaskItem(prompt="1+" * 300 + "1=", reference="0")]
    cfg = load_config(overrides=["task.chat_template=off", "task.name=tool_arith", "env.name=tool_arith"])
    fmt = resolve_prompt_format(cfg, tok, items, context=512, log=lambda _s: None)
    assert fmt.max_prompt_tokens == 0
