"""End to end on a very small model: a few RL steps, a crash and an exact resume, evaluation, CLI.

Sizes are tiny so the whole file runs in seconds on 2 CPU cores; learning itself is measured by
``benchmarks/experiments/train_default.py``, not here.
"""

import json
import math

import pytest
import torch

from grpolab.cli import main as cli_main
from grpolab.config import load_config
from grpolab.models import load_model
from grpolab.rollout import Experience
from grpolab.train import UpdateSpec, update
from grpolab.train.policy_update import micro_batches
from grpolab.train import train
from grpolab.train.checkpoint import latest_checkpoint
from grpolab.train.metrics_log import read_metrics

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
    "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=16", "sft.n_eval=8",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=16",
    "trainer.eval_every=2", "trainer.save_every=2", "log.progress=false", "log.plots=false",
    "log.tensorboard=false",
]

VOLATILE = ("time/", "tokens_per_s", "timing_s/", "perf/throughput", "memory/")  # + their verl-style aliases


def _stable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _cfg(run_dir, *extra):
    return load_config(overrides=SMALL + [f"trainer.run_dir={run_dir}", *extra])


@pytest.mark.parametrize("extra", [
    [],
    # off-policy: 2 epochs x 2 mini-batches, micro-batches, policy lag, KL, CTPO + BA
    ["trainer.epochs=2", "trainer.mini_batches=2", "trainer.micro_batch_size=3", "trainer.policy_lag=1",
     "objective.kl_coef=0.05", "preset=ctpo", "objective.aggregation=balanced"],
])
def test_crash_then_resume_matches_uninterrupted_run(tmp_path, monkeypatch, extra, kill_during_step):
    steps = ["trainer.steps=4", *extra]
    full = train(_cfg(tmp_path / "full", *steps), log=lambda *_: None)
    assert full.steps == 4
    rows_full = read_metrics(tmp_path / "full")
    assert [r["step"] for r in rows_full] == [1, 2, 3, 4]
    for r in rows_full:
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in r.values())
    if extra:  # off-policy settings really are off-policy
        assert any(r["update/ratio_max"] != 1.0 for r in rows_full)

    # the same run, killed during step 3 (after the step-2 checkpoint) ...
    kill_during_step(3, lambda: train(_cfg(tmp_path / "crashed", *steps), log=lambda *_: None))
    assert latest_checkpoint(tmp_path / "crashed").step == 2
    # ... and resumed: identical metrics and weights
    resumed = train(_cfg(tmp_path / "crashed", *steps), resume=True, log=lambda *_: None)
    assert resumed.steps == 4
    assert _stable(read_metrics(tmp_path / "crashed")) == _stable(rows_full)
    m_full, _ = load_model(tmp_path / "full" / "final")
    m_res, _ = load_model(tmp_path / "crashed" / "final")
    for (k, a), (_, b) in zip(m_full.state_dict().items(), m_res.state_dict().items()):
        assert torch.equal(a, b), k


def test_evaluation_settings_do_not_change_the_training_trajectory(tmp_path):
    """Greedy evaluation draws from torch's global stream, as many draws as it has items; the
    update's mini-batch order must not (it comes from the run's training generator), or a
    run's steps would depend on task.n_eval and trainer.eval_every with trainer.mini_batches > 1."""
    base = ["trainer.steps=2", "trainer.mini_batches=2", "trainer.skip_zero_advantage=false"]
    rows = {}
    for name, extra in (("few", ["task.n_eval=8", "trainer.eval_every=2"]),
                        ("many", ["task.n_eval=32", "trainer.eval_every=1"])):
        train(_cfg(tmp_path / name, *base, *extra), log=lambda *_: None)
        rows[name] = [{k: v for k, v in r.items() if not k.startswith("eval/")}
                      for r in _stable(read_metrics(tmp_path / name))]
    assert [r["step"] for r in rows["few"]] == [1, 2]
    assert rows["few"] == rows["many"]


def test_run_directory_outputs_and_cli(tmp_path, capsys):
    run = tmp_path / "run"
    args = ["train", *sum([["--set", s] for s in SMALL + ["trainer.steps=2", f"trainer.run_dir={run}",
                                                        "log.plots=true", "log.tensorboard=true",
                                                        "trainer.skip_zero_advantage=false"]], [])]
    assert cli_main(args) == 0
    for name in ("config.yaml", "metrics.jsonl", "summary.md", "final/config.json", "sft/config.json",
                 "plots/reward.png", "checkpoints/latest"):
        assert (run / name).exists(), name
    assert list((run / "tb").glob("events.*"))
    record = json.loads((run / "sft" / "sft.json").read_text())
    assert record["steps"] == 4 and record["sft_config"]["max_steps"] == 4 and "ema" in record["sft_config"]
    row = read_metrics(run)[-1]
    for key in ("reward/mean", "accuracy", "length/mean", "length/std", "update/clip_frac",
                "update/approx_kl", "update/entropy", "update/grad_norm", "time/step", "tokens_per_s",
                "eval/accuracy"):
        assert key in row, key
    # a second plain `train` into the same directory refuses instead of clobbering the run
    capsys.readouterr()
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--resume" in err and len(err.strip().splitlines()) == 1
    # eval on the run directory: greedy, sampled, pass@k
    capsys.readouterr()
    assert cli_main(["eval", str(run), "--n", "8", "--samples", "4", "--max-new-tokens", "16"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0 <= report["greedy_accuracy"] <= 1 and set(report["pass_at_k"]) == {"1", "2", "4"}
    assert report["pass_at_k"]["1"] <= report["pass_at_k"]["4"]


def test_cli_sft_saves_model_and_record(tmp_path, capsys):
    out = tmp_path / "ws"
    args = ["sft", "--out", str(out), *sum([["--set", s] for s in SMALL + ["sft.ema=0.5"]], [])]
    assert cli_main(args) == 0
    assert "saved warm-started model" in capsys.readouterr().out
    load_model(out)  # a Hugging Face model directory that loads
    record = json.loads((out / "sft.json").read_text())
    assert record["steps"] == 4 and len(record["history"]) == 2 and record["sft_config"]["ema"] == 0.5
    assert 0 <= record["accuracy"] <= 1


def test_cli_config_error_exits_2(capsys):
    assert cli_main(["train", "--set", "objective.aggregation=nope"]) == 2
    assert "choose one of: token, sequence, constant, balanced" in capsys.readouterr().err


def test_cli_version_and_help(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0 and "grpolab" in capsys.readouterr().out
    assert cli_main([]) == 0 and "train" in capsys.readouterr().out


@pytest.mark.parametrize("aggregation", ["token", "sequence", "balanced"])
def test_skipping_zero_advantage_rows_leaves_the_update_unchanged(aggregation):
    """Rows with A = 0 add exactly nothing to the gradient; skipping them must not change the step."""
    import copy

    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import sample
    from grpolab.train.optim import build_optimizer, build_scheduler

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=2, intermediate_size=64), seed=0)
    prompts = [tok("1+2=")["input_ids"], tok("3+4+5=")["input_ids"], tok("9-3=")["input_ids"]]
    rollout = sample(model, prompts, group_size=4, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    # group 0 has signal, group 1 all-equal rewards (A = 0), group 2 signal
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0, -0.3, 0.3, 0.9, -0.9])
    params = {}
    for skip in (False, True):
        # the joint forward: skipping changes which rows share a micro-batch, and with
        # trainer.share_prompts which rows share a prompt forward, which is exact only to float32
        # rounding (tests/train/test_update.py compares the two forwards)
        cfg = _cfg("unused", f"trainer.skip_zero_advantage={str(skip).lower()}", "rollout.prompts_per_step=3",
                   f"objective.aggregation={aggregation}", "trainer.micro_batch_size=5", "trainer.share_prompts=false")
        m = copy.deepcopy(model).double()  # float64: compare the two paths tightly
        opt = build_optimizer(m, lr=1e-2, weight_decay=0.01, betas=(0.9, 0.99))
        sched = build_scheduler(opt, warmup_steps=0, total_steps=2, schedule="constant")
        out = update(m, opt, sched, Experience.from_rollout(rollout, adv), UpdateSpec.from_config(cfg))
        assert out["skipped_rows_frac"] == (4 / 12 if skip else 0.0)
        params[skip] = [p.detach().clone() for p in m.parameters()]
    for a, b in zip(params[False], params[True]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert any(not torch.equal(a, p.double()) for a, p in zip(params[True], model.parameters()))


def test_micro_batches_partition_rows_within_the_token_budget():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(1, 80), min_size=0, max_size=40), st.integers(1, 400), st.integers(0, 7))
    def check(lengths, budget, rows_per_micro):
        L = torch.tensor(lengths, dtype=torch.long)
        keep = torch.arange(len(lengths))[::2]  # a subset, as after skipping zero-advantage rows
        parts = micro_batches(keep, L, rows_per_micro, budget)
        flat = torch.cat(parts).tolist() if parts else []
        assert sorted(flat) == keep.tolist()  # every kept row exactly once
        for p in parts:
            assert len(p) >= 1
            if rows_per_micro:
                assert len(p) <= rows_per_micro
            elif len(p) > 1:
                assert len(p) * int(L[p].max()) <= budget
        if not rows_per_micro and parts:  # evened out: never more forwards than the greedy fill
            greedy, start = 0, 0
            lens = sorted((int(L[i]) for i in keep), reverse=True)
            for i in range(1, len(lens) + 1):
                if i == len(lens) or (i + 1 - start) * lens[start] > budget:
                    greedy, start = greedy + 1, i
            assert len(parts) <= greedy

    check()


def test_micro_batches_are_evened_out_under_the_token_budget():
    """24 equal rows of 196 tokens under 2,048: three micro-batches of 8, not 10 + 10 + 4 (the
    largest micro-batch sets the update's peak activation memory)."""
    parts = micro_batches(torch.arange(24), torch.full((24,), 196), 0, 2048)
    assert [len(p) for p in parts] == [8, 8, 8]
    # uneven lengths: evening out would need a fourth forward, so the greedy fill stays
    L = torch.tensor([200] * 10 + [20] * 14)
    parts = micro_batches(torch.arange(24), L, 0, 2000)
    assert [len(p) for p in parts] == [10, 14]


class _Sized(torch.nn.Module):
    """Only what auto_micro_batch_tokens reads: a config with the sizes and one parameter."""

    def __init__(self, hidden, layers, inter, dtype=torch.float32, **extra):
        super().__init__()
        from types import SimpleNamespace

        self.config = SimpleNamespace(hidden_size=hidden, num_hidden_layers=layers, intermediate_size=inter, **extra)
        self.w = torch.nn.Parameter(torch.zeros(1, dtype=dtype))


def test_auto_micro_batch_tokens_sizes_the_budget_from_the_model():
    from grpolab.train.policy_update import auto_micro_batch_tokens

    # SmolLM2-135M (30 layers, hidden 576, MLP 1536): 1.29 MB of activations per token -> 832 -> 1,024
    assert auto_micro_batch_tokens(_Sized(576, 30, 1536)) == 1024
    # the tiny default model: 57 KB per token -> 18,700, capped at 4,096 on CPU
    assert auto_micro_batch_tokens(_Sized(192, 4, 512)) == 4096
    # a 0.5B-class model (24 x 896, MLP 4864): 2.55 MB -> 420 -> 512; bf16 halves the bytes -> 1,024
    assert auto_micro_batch_tokens(_Sized(896, 24, 4864)) == 512
    assert auto_micro_batch_tokens(_Sized(896, 24, 4864, dtype=torch.bfloat16)) == 1024
    # a 7B-class model in float32 on CPU: floor of 256 tokens
    assert auto_micro_batch_tokens(_Sized(4096, 32, 11008)) == 256
    # the budget scales it: 8 GiB for the SmolLM2 shape -> 6,658 -> 8,192, capped at 4,096 on CPU
    assert auto_micro_batch_tokens(_Sized(576, 30, 1536), budget_bytes=8 << 30) == 4096
    assert auto_micro_batch_tokens(_Sized(576, 30, 1536), budget_bytes=256 << 20) == 256
    # no intermediate size: 4 x hidden; no sizes at all: the fallback
    assert auto_micro_batch_tokens(_Sized(576, 30, None)) == auto_micro_batch_tokens(_Sized(576, 30, 2304))
    assert auto_micro_batch_tokens(torch.nn.Linear(2, 2)) == 1024


def test_update_resolves_the_auto_budget_from_the_policy(monkeypatch):
    """trainer.micro_batch_tokens=0 (the default) reaches micro_batches as the model's auto budget;
    an explicit budget is passed through unchanged."""
    import grpolab.train.policy_update as pu

    assert load_config().trainer.micro_batch_tokens == 0
    seen = []
    real = pu.micro_batches
    monkeypatch.setattr(pu, "micro_batches", lambda *a: seen.append(a[3]) or real(*a))
    monkeypatch.setattr(pu, "auto_micro_batch_tokens", lambda model: 77)
    from grpolab.models import build_tokenizer
    from grpolab.models.tiny import build_tiny_model
    from grpolab.rollout import sample

    tok = build_tokenizer()
    policy = build_tiny_model(tok)

    r = sample(policy, [[tok.bos_token_id, 5, 6]], group_size=4, max_new_tokens=4, eos_token_id=None,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0))
    exp = Experience.from_rollout(r, torch.tensor([1.0, -1.0, 0.5, -0.5]))
    opt = torch.optim.SGD(policy.parameters(), lr=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    for tokens, want in ((0, 77), (300, 300)):
        spec = UpdateSpec.from_config(load_config(overrides=[f"trainer.micro_batch_tokens={tokens}"]))
        seen.clear()
        update(policy, opt, sched, exp, spec)
        assert seen and set(seen) == {want}
    from grpolab.config import ConfigError

    with pytest.raises(ConfigError, match="trainer.micro_batch_tokens"):
        load_config(overrides=["trainer.micro_batch_tokens=-1"])


def test_trains_a_local_hf_model_of_another_family(tmp_path):
    """model.path: any AutoModelForCausalLM directory (here a tiny Qwen2 built from a config)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from grpolab.models import build_tokenizer, save_model

    tok = build_tokenizer()
    qwen = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=64, max_position_embeddings=128,
        pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
    save_model(qwen, tok, tmp_path / "qwen")
    cfg = _cfg(tmp_path / "run", f"model.path={tmp_path / 'qwen'}", "trainer.steps=2")
    result = train(cfg, log=lambda *_: None)
    assert result.steps == 2 and not (tmp_path / "run" / "sft").exists()  # no warm start for a given model
    trained, _ = load_model(tmp_path / "run" / "final")
    assert type(trained).__name__ == "Qwen2ForCausalLM"
