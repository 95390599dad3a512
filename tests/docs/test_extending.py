"""The worked examples of docs/extending.md run as written (examples/extending/*.py).

Each piece is checked on its own (by hand-computed values), then trained for 2 steps: the reward
through the `grpolab` command in a fresh process (it is registered from outside the package, by
`module:function`), the task, environment and loss pieces through the Python API.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "extending"
DOC = ROOT / "docs" / "extending.md"

# a 2-step run of a ~20k-parameter model: seconds, not minutes
SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.n_train=64", "task.n_eval=8", "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=8",
    "sft.n_eval=8", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
    "trainer.eval_every=2", "trainer.preflight=false", "log.progress=false", "log.plots=false",
    "log.tensorboard=false", "trainer.steps=2",
]


@pytest.fixture(scope="module")
def examples():
    """The example modules, imported once (importing registers their pieces); afterwards the
    registries are as they were, so no other test sees the examples' names."""
    import grpolab.rewards.base as rewards_base
    import grpolab.tasks.base as tasks_base
    from grpolab.envs import ENVS
    from grpolab.objectives import ADVANTAGE_ESTIMATORS, AGGREGATIONS

    saved = [(reg, "_items", dict(reg._items)) for reg in (ENVS, AGGREGATIONS, ADVANTAGE_ESTIMATORS)]
    saved += [(tasks_base, "_TASKS", dict(tasks_base._TASKS)), (rewards_base, "_REWARDS", dict(rewards_base._REWARDS))]
    names = ("brevity", "max_task", "guess_env", "sqrt_loss")
    sys.path.insert(0, str(EXAMPLES))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(EXAMPLES))
        for owner, attr, items in saved:
            current = getattr(owner, attr)
            current.clear()
            current.update(items)
        for name in names:
            sys.modules.pop(name, None)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_the_guide_shows_the_example_files():
    """Every example file is named in the guide, and every code block of the guide is a verbatim
    excerpt of one of them (so the guide cannot drift from the code the tests run)."""
    import re

    text = DOC.read_text()
    sources = {}
    for name in ("brevity.py", "brevity.yaml", "max_task.py", "guess_env.py", "sqrt_loss.py"):
        assert f"examples/extending/{name}" in text, name
        sources[name] = (EXAMPLES / name).read_text()
    blocks = re.findall(r"```(python|yaml)\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    for lang, block in blocks:
        assert any(block.strip() in src for src in sources.values()), block[:200]


# ----------------------------------------------------------------------------- a reward


def test_brevity_by_hand(examples):
    brevity = examples["brevity"].brevity
    assert brevity("", "x").score == 1.0
    assert brevity("#12", "12", max_chars=20).score == pytest.approx(1 - 3 / 20)
    assert brevity("x" * 40, "", max_chars=20).score == 0.0


def test_reward_from_outside_the_package_trains_with_grpolab_train(tmp_path):
    """`grpolab train examples/extending/brevity.yaml` in a fresh process: the reward module is
    found on PYTHONPATH by its `module:function` name, and every logged reward is
    math + 0.2 * brevity of that completion."""
    from grpolab.rewards import math_reward

    sys.path.insert(0, str(EXAMPLES))
    try:
        from brevity import brevity
    finally:
        sys.path.remove(str(EXAMPLES))
    run = tmp_path / "run"
    exe = shutil.which("grpolab", path=str(Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-c", "import sys; from grpolab.cli import main; sys.exit(main())"]
    sets = SMALL + ["task.options.max_digits=1", "task.options.max_terms=3", f"trainer.run_dir={run}",
                    "log.completions_every=1", "log.completions_n=2"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd + ["train", str(EXAMPLES / "brevity.yaml")] + sum([["--set", s] for s in sets], []),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in _metrics(run)] == [1, 2]
    rows = [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    for row in rows:
        want = math_reward(row["completion"], row["reference"]).score \
            + 0.2 * brevity(row["completion"], row["reference"], max_chars=20).score
        assert math.isclose(row["reward"], want, rel_tol=0, abs_tol=1e-6), row
        assert row["reward"] > 0  # brevity alone gives an 8-token completion at least 0.6 * 0.2


def test_a_misspelled_reward_module_is_one_error_line(tmp_path, capsys):
    from grpolab.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "brevity.yaml").read_text().replace("brevity:brevity", "brevity:brevty"))
    sys.path.insert(0, str(EXAMPLES))
    try:
        assert main(["train", str(bad), "--set", f"trainer.run_dir={tmp_path / 'run'}"]) == 2
    finally:
        sys.path.remove(str(EXAMPLES))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: task.options.reward: ")
    assert "'brevity' has no attribute 'brevty'" in err[0] and "brevity" in err[0]
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- a task


def test_max_task_items(examples):
    from grpolab.tasks import get_task

    task = get_task("max_of", n_digits=4)
    train, held_out = task.items("train", 50), task.items("eval", 10)
    assert not {i.prompt for i in train} & {i.prompt for i in held_out}
    for it in train:
        digits = [int(d) for d in it.prompt[len("max "):-1].split()]
        assert len(digits) == 4 and it.reference == str(max(digits))
        assert it.score(it.demonstration).score == 1.0
        assert it.score("#" + str((max(digits) + 1) % 10)).score == 0.0
    with pytest.raises(ValueError, match="n_digits"):
        get_task("max_of", n_digits=9)


def test_max_task_trains(examples, tmp_path):
    run = tmp_path / "run"
    assert examples["max_task"].main([str(run), *SMALL]) == 0
    assert [r["step"] for r in _metrics(run)] == [1, 2]
    saved = json.loads(json.dumps(__import__("yaml").safe_load((run / "config.yaml").read_text())))
    assert saved["task"]["name"] == "max_of"


# ----------------------------------------------------------------------------- an environment


def test_guess_env_episode_by_hand(examples):
    from grpolab.envs import make_env
    from grpolab.tasks import TaskItem

    env = make_env("guess")
    item = TaskItem(prompt="guess 0-9\n", reference="7", reward="exact")
    assert env.reset(item) == "guess 0-9\n"
    assert env.step("guess(4)").observation == "\n=higher\n"
    bad = env.step("click(3)")
    assert bad.info == {"invalid": True} and not bad.done
    assert env.step("guess(8)").observation == "\n=lower\n"
    res = env.step("guess(7)")
    assert res.done and res.reward == 1.0
    assert examples["guess_env"].expert_actions(7) == ["guess(4)", "guess(7)"]
    assert max(len(examples["guess_env"].expert_actions(s)) for s in range(10)) == 4


def test_guess_task_transcripts_win(examples):
    from grpolab.envs import make_env, run_script

    for it in examples["guess_env"].GuessTask().items("train", 20):
        actions = [text for role, text in it.meta["transcript"] if role == "act"]
        _, ret, done = run_script(make_env("guess"), it, actions)
        assert done and ret == 1.0


def test_guess_env_trains(examples, tmp_path):
    run = tmp_path / "run"
    assert examples["guess_env"].main([str(run), *SMALL]) == 0
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["episode/turns"] >= 1 for r in rows)  # episodes were played in the environment


# ----------------------------------------------------------------------------- a loss


def test_sqrt_aggregation_by_hand(examples):
    from grpolab.objectives import aggregation_weights, policy_loss

    mask = torch.tensor([[1., 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    W = aggregation_weights(mask, "sqrt")
    # lengths 1 and 4: sqrt 1 and 2 -> totals 1/3 and 2/3; per token 1/3 and (2/3)/4 = 1/6; empty row 0
    want = torch.tensor([[1 / 3, 0, 0, 0], [1 / 6] * 4, [0.] * 4])
    assert torch.allclose(W, want, atol=1e-7, rtol=0)
    # micro-batches with the full batch's weights give the full loss
    torch.manual_seed(0)
    logp, old, adv = -torch.rand(3, 4), -torch.rand(3, 4), torch.tensor([1., -1., 0.5])
    full, _ = policy_loss(logp, old, adv, mask, aggregation="sqrt")
    parts = sum(policy_loss(logp[r], old[r], adv[r], mask[r], weights=W[r])[0] for r in (slice(0, 1), slice(1, 3)))
    assert torch.allclose(full, parts, atol=1e-7, rtol=0)


def test_minmax_advantages_by_hand(examples):
    from grpolab.objectives import get_advantage_estimator

    fn = get_advantage_estimator("minmax")
    rewards = torch.tensor([1., 0., 0., 1., 3., 3., 2., 0., 5.])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2])
    # group 0: mean 0.5, spread 1; group 1: all equal -> 0; group 2: mean 7/3, spread 5
    want = torch.tensor([0.5, -0.5, -0.5, 0.5, 0., 0., (2 - 7 / 3) / 5, (0 - 7 / 3) / 5, (5 - 7 / 3) / 5])
    assert torch.allclose(fn(rewards, groups), want, atol=1e-6, rtol=0)


def test_loss_pieces_train(examples, tmp_path):
    """Both pieces reach the update: they are called on every step's batch, and (scored by the
    brevity reward, which differs between samples) the loss and gradient are not zero."""
    from grpolab.objectives import ADVANTAGE_ESTIMATORS, AGGREGATIONS

    mod = examples["sqrt_loss"]
    calls = {"sqrt": 0, "minmax": 0}

    def agg_spy(mask_BT, **kw):
        calls["sqrt"] += 1
        return mod.sqrt_aggregation(mask_BT, **kw)

    def adv_spy(rewards_B, group_ids_B):
        calls["minmax"] += 1
        return mod.minmax_advantages(rewards_B, group_ids_B)

    AGGREGATIONS.register("sqrt", overwrite=True)(agg_spy)
    ADVANTAGE_ESTIMATORS.register("minmax", overwrite=True)(adv_spy)
    try:
        run = tmp_path / "run"
        assert mod.main([str(run), *SMALL, "task.options.max_digits=1", "task.options.reward=brevity:brevity"]) == 0
    finally:
        AGGREGATIONS.register("sqrt", overwrite=True)(mod.sqrt_aggregation)
        ADVANTAGE_ESTIMATORS.register("minmax", overwrite=True)(mod.minmax_advantages)
    rows = _metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    assert calls["sqrt"] >= 2 and calls["minmax"] >= 2, calls
    assert any(r["update/grad_norm"] > 0 for r in rows), [r["update/grad_norm"] for r in rows]
