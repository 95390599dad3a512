"""Issue 62, item 1: a non-finite loss, gradient or weight stops the run at that step with one error
naming the cause, and a non-finite model is never saved. float16 training is refused (an optimizer
step turns float16 weights into NaN); a float16 checkpoint loaded with model.dtype=auto trains in
float32. (Before: float16 made every weight NaN at the first step, the run blamed "no reward
variance", saved the NaN model to final/ and exited 0.)"""

from __future__ import annotations

import copy

import pytest
import torch

from grpolab import objectives as obj
from cli_helpers import sets, tiny_run
from grpolab.cli import main
from grpolab.config import load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.rollout import make_collector
from grpolab.train import TrainState, UpdateSpec, update
from grpolab.train.checkpoint import save_checkpoint
from grpolab.train.loop import learning_signal
from grpolab.train.nonfinite import NonFiniteError

SMALL = tiny_run(3)


def _one_error(capsys, argv):
    capsys.readouterr()
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), (rc, err)
    return err[0]


@pytest.mark.parametrize("dry", [False, True])
def test_float16_training_is_refused_before_any_work(tmp_path, capsys, dry):
    run = tmp_path / "run"
    err = _one_error(capsys, ["train", *(["--dry-run"] if dry else []),
                              *sets(*SMALL, "model.dtype=float16", f"trainer.run_dir={run}")])
    assert "model.dtype=float16 cannot be trained" in err and "model.dtype=float32" in err and "bfloat16" in err
    assert not run.exists()  # nothing written


def test_float16_checkpoint_with_auto_dtype_trains_in_float32(tmp_path, capsys):
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64), seed=0).half()
    src = tmp_path / "fp16"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    run = tmp_path / "run"
    assert main(["train", *sets(*SMALL, f"model.path={src}", "trainer.steps=2",
                                 f"trainer.run_dir={run}")]) == 0
    assert "holds float16 weights" in capsys.readouterr().out
    from safetensors.torch import load_file

    weights = load_file(str(run / "final" / "model.safetensors"))
    assert all(w.dtype == torch.float32 and torch.isfinite(w).all() for w in weights.values())


def test_diverging_weights_stop_the_run_at_that_step(tmp_path, capsys):
    # lr 1e30 with weight decay 1: the weights grow by 1e30 per step and overflow at step 2
    run = tmp_path / "run"
    err = _one_error(capsys, ["train", *sets(*SMALL, "optim.lr=1e30", "optim.weight_decay=1",
                                              "optim.warmup_steps=0", f"trainer.run_dir={run}")])
    assert err.startswith("error: training stopped at step 2: the ")
    # which quantity overflows first depends on the sampled batch; each is named
    assert any(cause in err for cause in ("the loss is", "the gradient norm is", "the weights after the optimizer"))
    assert "lower optim.lr" in err and "step_000001" in err
    assert not (run / "final").exists() and not (run / "summary.md").exists()
    assert sorted(p.name for p in (run / "checkpoints").glob("step_*")) == ["step_000001"]


@pytest.fixture(scope="module")
def step_parts():
    tok = build_tokenizer()
    policy = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                   intermediate_size=64), seed=0).eval()
    items = get_task("arith", max_digits=1, max_terms=3).items("train", 2)
    exp = make_collector(tok, max_new_tokens=6).collect(policy, items, group_size=2,
                                                        generator=torch.Generator().manual_seed(1))
    return policy, tok, exp.replace(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0]))


def _update(step_parts, spoil):
    policy, tok, exp = step_parts
    cfg = load_config(overrides=["rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=6",
                                 "optim.warmup_steps=0"])
    model = copy.deepcopy(policy)
    state = TrainState.create(cfg, model, tok, torch.Generator().manual_seed(0))
    spec = UpdateSpec.from_config(cfg)
    exp = learning_signal(exp, state, spec, obj.get_advantage_estimator(cfg.objective.advantage))
    spoil(model, state)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(NonFiniteError) as e:
        update(state.policy, state.optimizer, state.scheduler, exp, spec)
    return str(e.value), before, model


def test_nan_loss_stops_before_its_backward(step_parts):
    def spoil(model, _state):
        with torch.no_grad():
            model.lm_head.weight[0, 0] = float("nan")

    msg, before, model = _update(step_parts, spoil)
    assert msg.startswith("the loss is NaN")
    assert all(p.grad is None or not p.grad.abs().sum() for p in model.parameters())  # no backward ran


def test_infinite_gradient_stops_before_the_optimizer_step(step_parts):
    def spoil(model, _state):  # a finite loss whose gradient overflows
        model.lm_head.weight.register_hook(lambda g: g * float("inf"))

    msg, before, model = _update(step_parts, spoil)
    assert msg.startswith("the gradient norm is")
    for a, b in zip(before, model.parameters()):  # the weights never took the step
        assert torch.equal(a, b.detach())


def test_non_finite_weights_after_the_step(step_parts):
    def spoil(_model, state):
        for g in state.optimizer.param_groups:
            g["lr"] = float("inf")

    msg, _before, _model = _update(step_parts, spoil)
    assert msg.startswith("the weights after the optimizer step hold NaN or infinity")


def test_a_non_finite_model_is_never_saved(step_parts, tmp_path):
    policy, tok, _exp = step_parts
    model = copy.deepcopy(policy)
    with torch.no_grad():
        model.lm_head.weight[1, 1] = float("inf")
    with pytest.raises(NonFiniteError, match="its checkpoint was not written"):
        save_checkpoint(tmp_path, 1, model, tok, {"step": 1})
    assert not (tmp_path / "checkpoints" / "step_000001").exists()
    from grpolab.config import ModelConfig
    from grpolab.train.setup import save_final

    with pytest.raises(NonFiniteError, match="was not written"):
        save_final(ModelConfig(), model, tok, tmp_path / "final")
    assert not (tmp_path / "final").exists()


def test_a_diverging_warm_start_stops_and_saves_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    err = _one_error(capsys, ["train", *sets(*[s for s in SMALL if s != "sft.enabled=no"], "sft.enabled=yes",
                                              "sft.lr=1e30", "sft.max_steps=6", "sft.eval_every=3",
                                              "sft.batch_size=8", "sft.n_eval=4", f"trainer.run_dir={run}")])
    assert err.startswith("error: the warm start stopped at its step ") and "lower sft.lr" in err
    assert not (run / "sft" / "config.json").exists() and not (run / "final").exists()
