"""A user's own rewards: ``module:function``, ``grpolab.rewards`` entry points, weighted lists.

They load at config time with one clear error per bad spec, score through the same never-raise
contract as the built-ins, and reach the trainer through ``task.options.reward``.
"""

from __future__ import annotations

import itertools
import math
import textwrap

import pytest

import grpolab.rewards.base as base
from grpolab.config import ConfigError, load_config
from grpolab.rewards import (
    RewardResult,
    RewardSpecError,
    get_reward,
    resolve_reward,
    safe_score,
    score_batch,
)
from grpolab.tasks import get_task, load_dataset_task
from grpolab.tasks.base import RewardOverride

_ids = itertools.count()

USER_MODULE = '''
from grpolab.rewards import RewardResult

CALLS = []

def brevity(completion, reference, **options):
    """1 for an empty completion, 0 from 20 characters on."""
    CALLS.append(options)
    return RewardResult(max(0.0, 1.0 - len(completion) / 20), {"chars": len(completion)})

def half(completion, reference):
    return 0.5

def scaled(completion, reference, *, scale=1.0):
    return scale

def boom(completion, reference, **options):
    raise RuntimeError("kaput")

def nan(completion, reference):
    return float("nan")

def text(completion, reference):
    return "high"

def one_arg(completion):
    return 1.0

class Holder:
    @staticmethod
    def exact_len(completion, reference):
        return float(len(completion) == int(reference))

NOT_A_FUNCTION = 3
'''


@pytest.fixture(autouse=True)
def isolated_registry(monkeypatch):
    monkeypatch.setattr(base, "_REWARDS", dict(base._REWARDS))


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A fresh module (unique name) on sys.path holding the reward functions above."""
    name = f"user_rewards_{next(_ids)}"
    (tmp_path / f"{name}.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_module_function_is_imported_registered_and_scored(user_module):
    spec = f"{user_module}:brevity"
    assert resolve_reward(spec) == spec
    assert get_reward(spec).__name__ == "brevity"
    assert safe_score(spec, "abcde", "x") == RewardResult(0.75, {"chars": 5})
    assert resolve_reward(f"{user_module}:Holder.exact_len") == f"{user_module}:Holder.exact_len"
    assert safe_score(f"{user_module}:Holder.exact_len", "abc", "3").score == 1.0


def test_get_reward_resolves_an_unregistered_module_function(user_module):
    # a TaskItem built in Python may carry "module:function" directly
    assert get_reward(f"{user_module}:half")("a", "b") == 0.5


@pytest.mark.parametrize("spec, needles", [
    ("no_such_module_xyz:f", ["no_such_module_xyz", "cannot be imported", "PYTHONPATH"]),
    ("{m}:nothere", ["has no attribute 'nothere'", "brevity"]),
    ("{m}:NOT_A_FUNCTION", ["is a int, not a function"]),
    ("{m}:one_arg", ["cannot be called as fn(completion, reference)"]),
    ("{m}:", ["'package.module:function'"]),
    ("bogus", ["unknown reward 'bogus'", "'math'", "package.module:function"]),
    ([{"name": "math", "weight": "high"}], ["weight 'high' is not a number"]),
    ([{"name": "math", "weight": True}], ["weight True is not a number"]),
    ([{"name": "math", "weight": float("inf")}], ["weight inf is not a number"]),
    ([{"name": "math", "wieght": 1}], ["unknown key(s) ['wieght']"]),
    ([{"weight": 1}], ["needs a 'name'"]),
    ([{"name": "math", "options": 3}], ["options must be a mapping"]),
    ([{"name": "{m}:nothere"}], ["has no attribute 'nothere'"]),
    ([], ["the reward list is empty"]),
    (3, ["is a int", "package.module:function"]),
])
def test_bad_specs_name_the_problem(user_module, spec, needles):
    if isinstance(spec, str):
        spec = spec.replace("{m}", user_module)
    elif isinstance(spec, list):
        spec = [{k: (v.replace("{m}", user_module) if isinstance(v, str) else v) for k, v in e.items()}
                for e in spec]
    with pytest.raises(RewardSpecError) as info:
        resolve_reward(spec)
    for needle in needles:
        assert needle in str(info.value), (needle, str(info.value))


def test_a_module_that_fails_to_import_says_why(tmp_path, monkeypatch):
    (tmp_path / "broken_rewards_mod.py").write_text("import not_installed_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RewardSpecError, match=r"importing module 'broken_rewards_mod' failed: "
                                              r"ModuleNotFoundError.*not_installed_dependency_xyz"):
        resolve_reward("broken_rewards_mod:f")


def test_user_rewards_never_raise_into_the_trainer(user_module):
    for fn, err in (("boom", "RuntimeError: kaput"), ("nan", "ValueError"), ("text", "TypeError")):
        spec = resolve_reward(f"{user_module}:{fn}")
        res = safe_score(spec, "x", "y")
        assert res.score == 0.0 and err in res.info["error"], res
        batch = score_batch([(spec, "x", "y")] * 3, workers=2, min_parallel=1)
        assert [r.score for r in batch] == [0.0] * 3 and all(err in r.info["error"] for r in batch)


def test_weighted_list_sums_parts_by_hand(user_module):
    name = resolve_reward([{"name": "math", "weight": 1.0}, {"name": f"{user_module}:brevity", "weight": 0.2}])
    assert name == f"math*1+{user_module}:brevity*0.2"
    # "#4" against "4": math 1.0; brevity 1 - 2/20 = 0.9 -> 1.0 + 0.2 * 0.9 = 1.18
    res = safe_score(name, "#4", "4")
    assert math.isclose(res.score, 1.18, rel_tol=0, abs_tol=1e-12)
    assert res.info["parts"] == {"math": 1.0, f"{user_module}:brevity": 0.9}
    assert "error" not in res.info
    # a wrong answer of 10 characters: 0 + 0.2 * 0.5
    assert math.isclose(safe_score(name, "#5 abcdefg", "4").score, 0.1, abs_tol=1e-12)
    # the same list again is the same registered reward
    assert resolve_reward([{"name": "math"}, {"name": f"{user_module}:brevity", "weight": 0.2}]) == name


def test_weighted_part_options_and_item_options(user_module):
    name = resolve_reward([{"name": f"{user_module}:scaled", "weight": 2.0, "options": {"scale": 0.25}},
                           {"name": f"{user_module}:scaled", "weight": -1.0}])
    res = safe_score(name, "x", "y")
    assert res.score == 2.0 * 0.25 - 1.0 * 1.0
    assert set(res.info["parts"]) == {f"{user_module}:scaled", f"{user_module}:scaled#1"}
    # item options go to the parts that declare them (math does not take `numbers`)
    mixed = resolve_reward([{"name": "math"}, {"name": f"{user_module}:scaled"}])
    assert safe_score(mixed, "#4", "4", scale=3.0, numbers=[1, 2]).score == 1.0 + 3.0
    module = __import__(user_module)
    catch_all = resolve_reward([{"name": f"{user_module}:brevity"}])
    safe_score(catch_all, "", "y", numbers=[1, 2])
    assert module.CALLS[-1] == {"numbers": [1, 2]}


def test_a_failing_part_scores_zero_and_reports_while_the_others_stand(user_module):
    name = resolve_reward([{"name": "math"}, {"name": f"{user_module}:boom", "weight": 0.5}])
    res = safe_score(name, "#4", "4")
    assert res.score == 1.0
    assert res.info["parts"] == {"math": 1.0, f"{user_module}:boom": 0.0}
    assert res.info["error"] == f"{user_module}:boom: RuntimeError: kaput"


def test_entry_point_rewards_load_on_first_use(tmp_path, monkeypatch, user_module):
    dist = tmp_path / "plugins" / "my_reward_plugin-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-reward-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(f"""\
        [grpolab.rewards]
        brief = {user_module}:brevity
        broken = {user_module}:nothere
        """))
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    assert "brief" not in base._REWARDS
    assert resolve_reward("brief") == "brief"
    assert safe_score("brief", "abcde", "x").score == 0.75
    with pytest.raises(RewardSpecError, match=r"reward 'broken' \(entry point .*nothere.*cannot be loaded"):
        resolve_reward("broken")
    with pytest.raises(RewardSpecError, match=r"entry points \(grpolab.rewards\): \['brief', 'broken'\]"):
        resolve_reward("brevity")


def test_task_option_reward_overrides_any_task(user_module):
    task = get_task("arith", max_digits=1, reward=[{"name": "math"}, {"name": f"{user_module}:brevity", "weight": 0.2}])
    assert isinstance(task, RewardOverride) and task.name == "arith"
    plain = get_task("arith", max_digits=1).items("train", 4)
    items = task.items("train", 4)
    assert [i.prompt for i in items] == [i.prompt for i in plain]
    for it in items:
        assert it.reward == f"math*1+{user_module}:brevity*0.2"
        # the demonstration is correct: 1 + 0.2 * max(0, 1 - len/20)
        want = 1.0 + 0.2 * max(0.0, 1 - len(it.demonstration) / 20)
        assert math.isclose(it.score(it.demonstration).score, want, abs_tol=1e-12)
    # pairsum's items keep their reward options (pair_sum needs numbers and target)
    ps = get_task("pairsum", reward=[{"name": "pair_sum"}, {"name": f"{user_module}:half"}]).items("train", 2)
    assert all(it.reward_options and it.score(it.demonstration).score == 1.5 for it in ps)


def test_dataset_task_takes_the_resolved_name(tmp_path, user_module):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "p1", "answer": "2"}\n{"prompt": "p2", "answer": "3"}\n')
    task = get_task("dataset", path=str(data), eval_fraction=0.5, reward=f"{user_module}:Holder.exact_len")
    assert not isinstance(task, RewardOverride)
    it = task.items("train")[0]
    assert it.reward == f"{user_module}:Holder.exact_len"
    assert it.score("x" * int(it.reference)).score == 1.0
    assert load_dataset_task(data, reward="math").items("train")[0].reward == "math"


def test_config_time_errors(user_module):
    cfg = load_config(overrides=[f"task.options.reward={user_module}:brevity"])
    assert cfg.task.options["reward"] == f"{user_module}:brevity"
    for value, needle in ((f"{user_module}:nothere", "has no attribute 'nothere'"),
                          ("no_such_module_xyz:f", "cannot be imported"),
                          ("bogus", "unknown reward 'bogus'")):
        with pytest.raises(ConfigError, match=r"^task.options.reward: .*" + needle.replace("(", r"\(")):
            load_config(overrides=[f"task.options.reward={value}"])
    with pytest.raises(ConfigError, match="weight 'a lot' is not a number"):
        load_config(overrides={"task.options.reward": [{"name": "math", "weight": "a lot"}]})
    with pytest.raises(ConfigError, match=r"task.options.reward is not used with env.name='tool_arith'"):
        load_config(overrides={"task.name": "tool_arith", "env.name": "tool_arith", "task.options.reward": "math"})


SMALL_RUN = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
    "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=8", "sft.n_eval=8",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
    "trainer.eval_every=2", "trainer.preflight=false", "log.progress=false", "log.plots=false",
    "log.tensorboard=false", "trainer.steps=2",
]


def test_grpolab_train_scores_with_a_weighted_user_reward(tmp_path, user_module, capsys):
    import yaml

    from grpolab.cli import main
    from grpolab.train.metrics_log import read_metrics

    cfg = tmp_path / "reward.yaml"
    # every completion: 2.0 * 0.5 (half) + 0.5 * 0.0 (boom fails, reported) = 1.0
    cfg.write_text(yaml.safe_dump({"task": {"options": {"reward": [
        {"name": f"{user_module}:half", "weight": 2.0}, {"name": f"{user_module}:boom", "weight": 0.5}]}}}))
    run = tmp_path / "run"
    args = ["train", str(cfg)] + sum([["--set", s] for s in SMALL_RUN + [f"trainer.run_dir={run}"]], [])
    assert main(args) == 0, capsys.readouterr().err
    rows = read_metrics(run)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["reward/mean"] == r["reward/min"] == r["reward/max"] == 1.0
        assert r["reward/errors"] == 8  # every completion's boom part, counted as a verifier error
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["task"]["options"]["reward"][0] == {"name": f"{user_module}:half", "weight": 2.0}
