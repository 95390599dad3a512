"""Supervised warm start: learning-rate schedule, early stop at the target, config validation,
in-progress checkpoints and an exact resume after a kill."""

import json

import pytest

from grpolab.config import ConfigError, load_config
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.tasks import get_task
from grpolab.train.sft import SFTSpec, run_sft


def _setup():
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    task = get_task("arith")
    return model, tok, task.items("train", 64), task.items("eval", 8)


@pytest.mark.parametrize("schedule,factors", [
    ("constant", [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("linear", [0.5, 1.0, 1.0, 0.75, 0.5, 0.25]),
    ("cosine", [0.5, 1.0, 1.0, 0.8535533905932737, 0.5, 0.14644660940672627]),
])
def test_sft_lr_schedule(schedule, factors):
    model, tok, train, held = _setup()
    res = run_sft(model, tok, train, held, SFTSpec(max_steps=6, batch_size=4, lr=1e-3, target_accuracy=1.0,
                  eval_every=1, max_new_tokens=4, schedule=schedule, warmup_steps=2), log=lambda s: None)
    assert res.steps == 6
    assert [h["step"] for h in res.history] == [1, 2, 3, 4, 5, 6]
    assert [h["lr"] for h in res.history] == pytest.approx([1e-3 * f for f in factors], rel=1e-9)


def test_sft_stops_at_target_before_training():
    model, tok, train, held = _setup()
    res = run_sft(model, tok, train, held, SFTSpec(max_steps=5, batch_size=4, lr=1e-3, target_accuracy=0.0,
                  eval_every=1, max_new_tokens=4), log=lambda s: None)
    assert res.steps == 0 and res.history == []


def test_sft_schedule_validated():
    with pytest.raises(ConfigError, match="sft.schedule"):
        load_config(overrides={"sft.schedule": "exponential"})


def test_weight_average_matches_formula_and_swap_restores():
    import torch

    from grpolab.train.sft import _WeightAverage

    lin = torch.nn.Linear(3, 2)
    w0 = [p.detach().double().clone() for p in lin.parameters()]
    avg = _WeightAverage(lin, 0.9)
    expected = w0
    g = torch.Generator().manual_seed(0)
    for step in range(1, 8):
        with torch.no_grad():
            for p in lin.parameters():
                p.add_(torch.randn(p.shape, generator=g))
        avg.update(step)
        d = min(0.9, (1 + step) / (10 + step))
        expected = [d * e + (1 - d) * p.detach().double() for e, p in zip(expected, lin.parameters())]
    for a, e in zip(avg.avg, expected):
        assert torch.allclose(a.double(), e, atol=1e-6)
    raw = [p.detach().clone() for p in lin.parameters()]
    with avg.swapped_in():
        for p, e in zip(lin.parameters(), expected):
            assert torch.allclose(p.double(), e, atol=1e-6)
    for p, r in zip(lin.parameters(), raw):  # raw weights back, bit for bit
        assert torch.equal(p, r)
    avg.copy_to_model()
    for p, a in zip(lin.parameters(), avg.avg):
        assert torch.equal(p, a)
    with pytest.raises(ValueError, match="ema"):
        _WeightAverage(lin, 1.0)


def test_sft_with_ema_trains_the_same_raw_trajectory_and_returns_the_average(monkeypatch):
    import torch

    import grpolab.train.sft as sft

    seen = []

    class Recording(sft._WeightAverage):
        def copy_to_model(self):
            seen.append(([p.detach().clone() for p in self.params], [a.clone() for a in self.avg]))
            super().copy_to_model()

    monkeypatch.setattr(sft, "_WeightAverage", Recording)
    finals = {}
    for ema in (0.0, 0.5):
        model, tok, train, held = _setup()
        run_sft(model, tok, train, held, SFTSpec(max_steps=4, batch_size=4, lr=1e-2, target_accuracy=1.0,
                eval_every=2, max_new_tokens=4, ema=ema), log=lambda s: None)
        finals[ema] = [p.detach().clone() for p in model.parameters()]
    assert len(seen) == 3  # two checks with the average swapped in, then the final copy
    raw_before_final, avg_final = seen[-1]
    # evaluating with the average swapped in leaves training untouched: the raw weights are
    # exactly those of a run without averaging ...
    assert all(torch.equal(a, b) for a, b in zip(raw_before_final, finals[0.0]))
    # ... and the returned model is the average, which differs from the raw weights
    assert all(torch.equal(a, b) for a, b in zip(avg_final, finals[0.5]))
    assert any(not torch.equal(a, b) for a, b in zip(finals[0.0], finals[0.5]))


def test_sft_ema_validated():
    with pytest.raises(ConfigError, match="sft.ema"):
        load_config(overrides={"sft.ema": "1.5"})


def test_warm_start_selects_on_validation_items_not_the_test_set():
    from grpolab.train.setup import build_task_splits
    from grpolab.train.warm_start import sft_selection_split

    cfg = load_config(None, ["task.n_train=400", "task.n_eval=50", "sft.n_eval=64"])
    train, held = build_task_splits(cfg.task)
    demos, select = sft_selection_split(cfg, train, held)
    assert len(select) == 64 and len(demos) == 400 - 64
    prompts = lambda items: {it.prompt for it in items}  # noqa: E731
    assert prompts(select) == prompts(train[-64:])
    assert not prompts(select) & prompts(demos)  # never trained on
    assert not prompts(select) & prompts(held)  # the test set plays no part in choosing the warm start
    # at most a quarter of a small training split is held back
    cfg_small = load_config(None, ["task.n_train=40", "sft.n_eval=64"])
    train_s, held_s = build_task_splits(cfg_small.task)
    demos_s, select_s = sft_selection_split(cfg_small, train_s, held_s)
    assert len(select_s) == 10 and len(demos_s) == 30
    # the pre-2026-12-01 behaviour, kept to reproduce old warm starts
    cfg_old = load_config(None, ["task.n_train=400", "task.n_eval=50", "sft.n_eval=32", "sft.select_on=heldout"])
    demos_o, select_o = sft_selection_split(cfg_old, train, held)
    assert demos_o == train and select_o == held[:32]


def test_warm_start_validation_needs_training_items():
    from grpolab.train.warm_start import sft_selection_split

    cfg = load_config(None, ["task.n_train=3", "rollout.prompts_per_step=2"])
    train = get_task("arith").items("train", 3)
    with pytest.raises(ConfigError, match="sft.select_on=heldout"):
        sft_selection_split(cfg, train, train)
    with pytest.raises(ConfigError, match="sft.select_on"):
        load_config(None, ["sft.select_on=test"])


# ---------------------------------------------------------------------------------------------
# In-progress checkpoints: `grpolab sft --out OUT` killed part-way continues from OUT.partial.

SFT_SMALL = [
    "model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
    "sft.max_steps=6", "sft.eval_every=2", "sft.batch_size=8", "sft.n_eval=8", "sft.target_accuracy=1.0",
    "rollout.max_new_tokens=8",
]


def _sft(out, *extra):
    from grpolab.cli import main

    return main(["sft", *sum([["--set", s] for s in SFT_SMALL + list(extra)], []), "--out", str(out)])


def _same_weights(a, b) -> bool:
    import torch
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    assert wa.keys() == wb.keys()
    return all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("extra", [[], ["sft.ema=0.9", "sft.schedule=cosine", "sft.privileged_share=0.5"]])
def test_killed_warm_start_resumes_bit_identical(tmp_path, capsys, sft_steps, extra):
    assert _sft(tmp_path / "full", *extra) == 0
    assert sft_steps.taken == 6
    full = json.loads((tmp_path / "full" / "sft.json").read_text())
    assert full["steps"] == 6 and full["resumed_from"] == 0
    assert not (tmp_path / "full.partial").exists()  # removed once the final output is complete

    # killed during step 5: steps 1-4 are done, checkpoints after steps 2 and 4 (sft.save_every
    # unset: at each check), the older one pruned
    sft_steps.reset()
    sft_steps.kill_at = 5
    capsys.readouterr()
    assert _sft(tmp_path / "out", *extra) == 130
    assert "same `grpolab sft` command" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    partial = tmp_path / "out.partial" / "checkpoints"
    assert sorted(p.name for p in partial.iterdir()) == ["latest", "step_000004"]

    # the same command again: steps 5 and 6 only, and the result of the run that was never killed
    sft_steps.reset()
    assert _sft(tmp_path / "out", *extra) == 0
    assert sft_steps.taken == 2
    said = [line for line in capsys.readouterr().out.splitlines() if "resuming" in line]
    assert len(said) == 1 and "step 4" in said[0], said
    record = json.loads((tmp_path / "out" / "sft.json").read_text())
    assert record["resumed_from"] == 4 and record["steps"] == 6
    assert record["history"] == full["history"]  # losses, accuracies and rates, exactly
    assert _same_weights(tmp_path / "full", tmp_path / "out")
    assert not (tmp_path / "out.partial").exists()


def test_a_checkpoint_made_with_other_settings_starts_over_and_says_so(tmp_path, capsys, sft_steps):
    sft_steps.kill_at = 5
    assert _sft(tmp_path / "out") == 130
    assert (tmp_path / "out.partial" / "checkpoints" / "step_000004").exists()
    capsys.readouterr()
    sft_steps.reset()
    assert _sft(tmp_path / "out", "sft.lr=2e-3") == 0
    said = capsys.readouterr().out
    assert "other settings (sft.lr: 0.001 -> 0.002)" in said and "starting the warm start over" in said
    assert "resuming" not in said
    assert sft_steps.taken == 6  # from scratch
    # and nothing of the old checkpoint leaked in: the same as a fresh run with the new settings
    assert _sft(tmp_path / "fresh", "sft.lr=2e-3") == 0
    assert _same_weights(tmp_path / "out", tmp_path / "fresh")


def test_a_finished_warm_start_is_kept_not_rebuilt(tmp_path, capsys, sft_steps):
    # the same command again: nothing trains, nothing is rewritten
    assert _sft(tmp_path / "out") == 0
    record = (tmp_path / "out" / "sft.json").read_bytes()
    weights = (tmp_path / "out" / "model.safetensors").stat().st_mtime_ns
    capsys.readouterr()
    sft_steps.reset()
    assert _sft(tmp_path / "out") == 0
    assert sft_steps.taken == 0
    assert "already holds this warm start (6 steps" in capsys.readouterr().out
    assert (tmp_path / "out" / "sft.json").read_bytes() == record
    assert (tmp_path / "out" / "model.safetensors").stat().st_mtime_ns == weights

    # other settings (a longer warm start too): refused, naming the change and the ways on
    assert _sft(tmp_path / "out", "sft.max_steps=8") == 2
    err = capsys.readouterr().err
    assert "sft.max_steps: 6 -> 8" in err and "--overwrite" in err and "--out PATH" in err
    assert f"model.path={tmp_path / 'out'}" in err
    assert sft_steps.taken == 0 and (tmp_path / "out" / "sft.json").read_bytes() == record

    # --overwrite rebuilds it with the new settings: the same as a fresh build
    from grpolab.cli import main

    args = sum([["--set", s] for s in SFT_SMALL + ["sft.lr=2e-3"]], [])
    assert main(["sft", *args, "--out", str(tmp_path / "out"), "--overwrite"]) == 0
    assert sft_steps.taken == 6
    assert json.loads((tmp_path / "out" / "sft.json").read_text())["key"]["sft"]["lr"] == 2e-3
    assert _sft(tmp_path / "fresh", "sft.lr=2e-3") == 0
    assert _same_weights(tmp_path / "out", tmp_path / "fresh")

    # training on from it is a new warm start with model.path pointing at the old one
    assert _sft(tmp_path / "more", f"model.path={tmp_path / 'out'}", "sft.max_steps=2") == 0
    more = json.loads((tmp_path / "more" / "sft.json").read_text())
    assert more["steps"] == 2 and more["key"]["model"]["path"] == str(tmp_path / "out")


def test_a_model_without_a_settings_record_is_refused_unless_its_writer_was_killed(tmp_path, capsys, sft_steps):
    assert _sft(tmp_path / "out") == 0
    record = json.loads((tmp_path / "out" / "sft.json").read_text())
    del record["key"]  # an older grpolab's record
    (tmp_path / "out" / "sft.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert _sft(tmp_path / "out") == 2
    assert "no settings record" in capsys.readouterr().err
    # a model without sft.json: someone's model directory, unless the warm start's in-progress
    # checkpoint shows that its writer was killed just before the record
    (tmp_path / "out" / "sft.json").unlink()
    assert _sft(tmp_path / "out") == 2
    assert "not a grpolab warm start (no sft.json)" in capsys.readouterr().err
    (tmp_path / "out.partial").mkdir()
    sft_steps.reset()
    assert _sft(tmp_path / "out") == 0
    assert sft_steps.taken == 6 and "key" in json.loads((tmp_path / "out" / "sft.json").read_text())
    assert not (tmp_path / "out.partial").exists()


@pytest.mark.parametrize("save_every,newest,left", [("0", None, 6), ("3", "step_000003", 3)])
def test_save_every_sets_the_checkpoints(tmp_path, sft_steps, save_every, newest, left):
    sft_steps.kill_at = 5
    assert _sft(tmp_path / "out", f"sft.save_every={save_every}") == 130
    ckpts = tmp_path / "out.partial" / "checkpoints"
    assert (sorted(p.name for p in ckpts.glob("step_*")) if ckpts.exists() else []) == ([newest] if newest else [])
    sft_steps.reset()
    assert _sft(tmp_path / "out", f"sft.save_every={save_every}") == 0
    assert sft_steps.taken == left


def test_save_every_validated_and_not_a_setting_of_the_result():
    from grpolab.train.warm_start import warm_start_key

    for bad in ("-1", "2.5", "often"):
        with pytest.raises(ConfigError, match="sft.save_every"):
            load_config(overrides={"sft.save_every": bad})
    assert load_config(overrides={"sft.save_every": "null"}).sft.save_every is None
    # how often it checkpoints does not change what it learns: a cached warm start stays valid
    assert warm_start_key(load_config(overrides={"sft.save_every": "7"})) == warm_start_key(load_config())
