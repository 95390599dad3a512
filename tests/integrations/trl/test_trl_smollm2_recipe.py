"""The TRL recipe of the SmolLM2 example (grpolab.integrations.trl.recipe, examples/trl_smollm2_sums.py):
every setting of examples/smollm2_sums.yaml arrives in TRL's config, the trainer TRL builds prompts
the model exactly as grpolab does and scores with the task's own verifier, and settings TRL cannot
run the same way are refused before the model loads. A tiny chat model stands in for SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("trl", reason="trl is in the test extra: pip install -e '.[test]'")
pytest.importorskip("peft", reason="peft is in the test extra: pip install -e '.[test]'")
from grpolab.config import ConfigError, load_config  # noqa: E402
from grpolab.integrations.trl import recipe as trl_recipe  # noqa: E402
from grpolab.models.testing import make_chat_model_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
YAML = ROOT / "examples" / "smollm2_sums.yaml"


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    return make_chat_model_dir(tmp_path_factory.mktemp("chat") / "model")


def test_the_yamls_settings_map_to_trl():
    cfg = load_config(YAML)
    s = trl_recipe.trl_settings(cfg)
    assert s["per_device_train_batch_size"] == 32 and s["num_generations"] == 8  # 4 prompts x 8 samples
    assert s["gradient_accumulation_steps"] == 1 and s["max_steps"] == 10
    assert s["max_completion_length"] == 12 and s["temperature"] == 0.7 and s["top_p"] == 1.0 and s["top_k"] == 0
    assert s["learning_rate"] == 5e-4 and s["warmup_steps"] == 2 and s["lr_scheduler_type"] == "constant_with_warmup"
    assert (s["adam_beta1"], s["adam_beta2"], s["weight_decay"], s["max_grad_norm"]) == (0.9, 0.99, 0.0, 1.0)
    assert (s["epsilon"], s["epsilon_high"], s["beta"], s["scale_rewards"]) == (0.2, 0.28, 0.0, "group")
    assert s[trl_recipe._checkpointing_key()] is False and s["use_cpu"] is True and not s["bf16"] and not s["fp16"]
    assert (s["grpolab_aggregation"], s["grpolab_ratio"], s["grpolab_dual_clip"]) == ("token", "token", 3.0)
    assert "grpolab_aggregation" not in trl_recipe.trl_settings(cfg, adapter=False)
    lora = trl_recipe.trl_peft_config(cfg)
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (16, 32, 0.0)
    assert set(lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    cfg2 = load_config(YAML, ["optim.schedule=cosine", "objective.advantage=drgrpo", "trainer.seed=3"])
    s2 = trl_recipe.trl_settings(cfg2)
    assert (s2["lr_scheduler_type"], s2["scale_rewards"], s2["seed"]) == ("cosine", "none", 3)


@pytest.mark.parametrize("overrides, adapter, match", [
    (["credit.name=rlsd"], True, "credit.name='rlsd'"),
    (["objective.aggregation=balanced"], False, "use the adapter"),
    (["rollout.dynamic_sampling=true"], True, "rollout.dynamic_sampling=True"),
    (["trainer.policy_lag=1"], True, "trainer.policy_lag=1"),
])
def test_what_trl_cannot_run_the_same_way_is_refused_before_the_model_loads(tmp_path, overrides, adapter, match):
    cfg = load_config(YAML, [f"model.path={tmp_path / 'no-such-model'}", *overrides])
    with pytest.raises(ConfigError, match=match):
        trl_recipe.build_trl_trainer(cfg, output_dir=str(tmp_path / "out"), adapter=adapter)


def test_the_adapter_takes_grpolabs_objective_settings():
    cfg = load_config(YAML, ["objective.aggregation=balanced", "objective.ratio=cumulative",
                             "objective.clip_low=0.025", "objective.clip_high=0.05"])
    s = trl_recipe.trl_settings(cfg)
    assert (s["grpolab_aggregation"], s["grpolab_ratio"], s["epsilon"], s["epsilon_high"]) == \
        ("balanced", "cumulative", 0.025, 0.05)


def test_the_reward_is_the_items_own_verifier():
    from grpolab.tasks import get_task

    items = get_task("short_arith", max_operand=20, eval_fraction=0.5).items("train", 3)
    reward = trl_recipe.task_reward(items)
    assert reward.__name__ == "final_line"
    right = [[{"role": "assistant", "content": f"{it.reward_options['expression']} = {it.reference}"}] for it in items]
    wrong = [[{"role": "assistant", "content": f"{it.reference}\n\nIn mathematics"}] for it in items]
    assert reward(None, right, item=[0, 1, 2]) == [1.0, 1.0, 1.0]
    assert reward(None, wrong, item=[0, 1, 2]) == [0.0, 0.0, 0.0]
    same = float(items[0].reference == items[1].reference)
    assert reward(None, [items[1].reference, items[0].reference], item=[1, 1]) == [1.0, same]


def test_the_yamls_trainer_is_built_with_its_settings(chat_dir, tmp_path):
    from peft import PeftModel

    from grpolab.integrations.trl.trainer import GrpolabGRPOTrainer

    cfg = load_config(YAML, [f"model.path={chat_dir}"])  # the example, SmolLM2 swapped for a tiny chat model
    tr, train_items, eval_items, fmt = trl_recipe.build_trl_trainer(cfg, output_dir=str(tmp_path / "out"))
    assert isinstance(tr, GrpolabGRPOTrainer) and isinstance(tr.model, PeftModel)
    a = tr.args
    assert (a.per_device_train_batch_size, a.num_generations) == (32, 8)
    assert (a.max_completion_length, a.temperature) == (12, 0.7)
    assert (a.learning_rate, a.warmup_steps, a.max_steps) == (5e-4, 2, 10)
    assert getattr(a, trl_recipe._checkpointing_key()) is False 
    inner = tr.model.base_model.model
    assert not getattr(inner, "is_activation_checkpointing", getattr(inner, "is_gradient_checkpointing", False))
    assert tr.model.peft_config["default"].r == 16
    assert len(eval_items) == 64 and len(train_items) == 441 - 219  # task.n_eval, and the training half of 441 sums
    assert fmt.use_chat and tr.train_dataset[0]["prompt"] == [{"role": "user", "content": train_items[0].prompt}]


def test_trl_prompts_the_model_as_grpolab_does_and_trains(chat_dir, tmp_path):
    cfg = load_config(YAML, [f"model.path={chat_dir}", "trainer.steps=1", "rollout.prompts_per_step=2",
                             "rollout.group_size=2", "rollout.max_new_tokens=4"])
    clock = trl_recipe.StepClock()
    tr, train_items, _, fmt = trl_recipe.build_trl_trainer(cfg, output_dir=str(tmp_path / "out"), adapter=False,
                                                           callbacks=[clock])
    seen = []
    orig = tr._generate_and_score_completions

    def spy(inputs):
        out = orig(inputs)
        seen.append((inputs, out))
        return out

    tr._generate_and_score_completions = spy
    lora = {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_B" in n}
    tr.train()
    assert tr.state.global_step == 1 and len(clock.step_s) == 1 and clock.step_s[0] > 0 and clock.peak_rss_mb[0] > 0
    inputs, out = seen[0]
    assert len(inputs) == 4
    for b, row in enumerate(inputs):
        ids = out["prompt_ids"][b][out["prompt_mask"][b].bool()].tolist()
        assert ids == fmt.encode([train_items[row["item"]]], tr.processing_class)[0]  # grpolab's own prompt tokens
    assert any(not torch.equal(p, lora[n]) for n, p in tr.model.named_parameters() if n in lora) or \
        all(r["reward_std"] == 0 for r in tr.state.log_history if "reward_std" in r)
    policy = trl_recipe.trl_policy(tr)
    res = trl_recipe.heldout_accuracy(policy, tr.processing_class, train_items[:3], cfg, fmt)
    assert len(res.scores) == 3 and policy.training  # back in training mode
    final = trl_recipe.save_trl_policy(tr, tmp_path / "final")
    assert (final / "config.json").is_file() and not any("lora" in p.name for p in final.iterdir())


def test_the_example_script_reads_the_yaml_and_fails_with_one_error_line(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("trl_smollm2_sums", ROOT / "examples" / "trl_smollm2_sums.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    rc = example.main(["--set", f"model.path={tmp_path / 'no-such-model'}", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("error: model.path=") and "no-such-model" in err[-1]
    assert not (tmp_path / "out").exists()
    rc = example.main(["--set", "credit.name=rlsd", "--out", str(tmp_path / "out")])
    assert rc == 2 and "credit.name='rlsd'" in capsys.readouterr().err
