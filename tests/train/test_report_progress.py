"""Reports a user can trust (issue 35): step 0 on the eval plot, one line for identical curves,
integer step ticks, progress lines with an ETA in a log file, verl aliases opt-in."""

from __future__ import annotations

from pathlib import Path

from grpolab.config import load_config
from grpolab.utils.progress import LineProgress, format_seconds, progress_bar
from grpolab.train.report import plot_metrics, plot_series


def test_eval_series_starts_at_step_zero():
    rows = [{"step": 5, "eval/accuracy": 0.6}, {"step": 10, "eval/accuracy": 0.7}, {"step": 7}]
    assert plot_series(rows, ["eval/accuracy"], {"eval/accuracy": 0.5}) == [("eval/accuracy", [(0, 0.5), (5, 0.6),
                                                                                                  (10, 0.7)])]


def test_identical_curves_are_drawn_once_and_labelled_as_equal():
    rows = [{"step": s, "reward/mean": v, "accuracy": v} for s, v in [(1, 0.25), (2, 0.5)]]
    assert plot_series(rows, ["reward/mean", "accuracy"]) == [("reward/mean = accuracy", [(1, 0.25), (2, 0.5)])]
    rows[1]["reward/mean"] = 0.4  # partial credit: two curves
    assert [label for label, _ in plot_series(rows, ["reward/mean", "accuracy"])] == ["reward/mean", "accuracy"]


def test_plot_ticks_are_whole_steps(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ticks = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, path, *a, **k):
        fig.canvas.draw()
        ticks[str(path)] = [t for t in fig.axes[0].get_xticks() if 0 <= t <= 3]
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    rows = [{"step": s, "eval/accuracy": 0.5 + s / 10} for s in (1, 2, 3)]
    plot_metrics(tmp_path, rows, start={"eval/accuracy": 0.4})
    (path,) = [p for p in ticks if p.endswith("eval_accuracy.png")]
    assert ticks[path] and all(float(t).is_integer() for t in ticks[path])


def test_line_progress_prints_every_n_steps_with_eta():
    t = [100.0]
    lines: list[str] = []
    p = LineProgress(10, every=4, desc="grpo", log=lines.append, clock=lambda: t[0])
    for i in range(10):
        t[0] += 2.0
        p.set_postfix(reward="0.50")
        p.update(1)
    assert lines == ["grpo step 4/10 (40%) reward=0.50 mean 2.00 s/step, elapsed 8s, ETA 12s",
                     "grpo step 8/10 (80%) reward=0.50 mean 2.00 s/step, elapsed 16s, ETA 4s",
                     "grpo step 10/10 (100%) reward=0.50 mean 2.00 s/step, elapsed 20s, ETA 0s"]
    assert all("\r" not in x for x in lines)


def test_line_progress_of_a_resumed_run_times_only_its_own_steps():
    t = [0.0]
    lines: list[str] = []
    p = LineProgress(100, initial=50, every=25, log=lines.append, clock=lambda: t[0])
    for _ in range(25):
        t[0] += 1.0
        p.update(1)
    assert lines == ["step 75/100 (75%) mean 1.00 s/step, elapsed 25s, ETA 25s"]


def test_progress_bar_is_lines_off_a_terminal():
    assert isinstance(progress_bar(10, tty=False), LineProgress)
    assert LineProgress(400).every == 20  # about 20 lines per run by default
    assert format_seconds(75) == "1m15s" and format_seconds(3700) == "1h01m"


def test_training_in_a_log_file_prints_progress_lines(tmp_path):
    from grpolab.train import train

    lines: list[str] = []
    cfg = load_config(overrides=[
        "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
        "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
        "sft.enabled=no", "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "trainer.steps=4", "trainer.eval_every=2", "trainer.save_every=4", "trainer.preflight=false",
        "log.progress=true", "log.progress_every=2", "log.plots=false", "log.tensorboard=false",
        f"trainer.run_dir={tmp_path / 'run'}"])
    train(cfg, log=lines.append)  # pytest's stderr is not a terminal
    prog = [x for x in lines if x.startswith("grpo step")]
    assert [x.split(" (")[0] for x in prog] == ["grpo step 2/4", "grpo step 4/4"]
    assert all("ETA" in x and "reward=" in x for x in prog)


def test_verl_aliases_are_opt_in():
    from grpolab.train.step_metrics import metric_schema

    assert load_config().log.metric_names == "grpolab"
    assert not any(k.startswith("actor/") for k in metric_schema(load_config()))
    assert any(k.startswith("actor/") for k in metric_schema(load_config(overrides=["log.metric_names=both"])))


def test_item_progress_counts_batches_of_items():
    t = [0.0]
    lines: list[str] = []
    p = LineProgress(100, every=25, desc="eval greedy", unit="item", log=lines.append, clock=lambda: t[0])
    for n in (32, 32, 32, 4):  # batches cross the 25-item marks
        t[0] += 8.0
        p.update(n)
    assert lines == ["eval greedy 32/100 items (32%) mean 0.25 s/item, elapsed 8s, ETA 17s",
                     "eval greedy 64/100 items (64%) mean 0.25 s/item, elapsed 16s, ETA 9s",
                     "eval greedy 96/100 items (96%) mean 0.25 s/item, elapsed 24s, ETA 1s",
                     "eval greedy 100/100 items (100%) mean 0.32 s/item, elapsed 32s, ETA 0s"]


def test_evaluate_reports_items_done_per_batch():
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.tasks import get_task
    from grpolab.measure.evaluate import evaluate

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32))
    items = get_task("arith").items("eval", 10)
    done: list[int] = []
    evaluate(model, tok, items, greedy=False, samples=2, max_new_tokens=4, batch_size=8, progress=done.append)
    assert done == [4, 4, 2]


def test_warm_start_reports_progress():
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.tasks import get_task
    from grpolab.train.sft import SFTSpec, run_sft

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32))
    items = get_task("arith").items("eval", 6)
    lines: list[str] = []
    train = get_task("arith").items("train", 16)
    run_sft(model, tok, train, items, SFTSpec(max_steps=4, eval_every=2, batch_size=4, lr=1e-3, target_accuracy=1.0,
                                             max_new_tokens=4), log=lines.append)
    steps = [x for x in lines if x.startswith("sft step")]
    assert len(steps) == 2 and all("s/step, at most" in x and "left)" in x for x in steps)


def test_every_figure_states_model_prompt_format_and_peak_memory(tmp_path, monkeypatch):
    """Issue 44: a run's figure read alone says which prompt format and how much memory it took."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpolab.config import Config
    from grpolab.train.loop import TrainResult
    from grpolab.train.report import write_report

    texts: dict[str, list[str]] = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, path, *a, **k):
        texts[str(path)] = [t.get_text() for t in fig.texts]
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    rows = [{"step": s, "eval/accuracy": 0.5, "reward/mean": 0.4, "memory/peak_rss_mb": 900.0 + 100 * s}
            for s in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = Config()
    result = TrainResult(run_dir=tmp_path, steps=3, start_accuracy=0.4, final_accuracy=0.5, best_accuracy=0.5,
                         seconds=3.0)
    fmt = "the tokenizer's chat template, prompt template 'Q: {prompt}'"
    write_report(tmp_path, cfg, result, plots=True, prompt_format=fmt)
    assert {Path(p).name for p in texts} >= {"eval_accuracy.png", "reward.png"}
    for captions in texts.values():
        caption = " ".join(captions).replace("\n", " ")
        assert fmt in caption and "peak memory: RSS 1200 MiB" in caption and "tiny (built-in)" in caption
    md = (tmp_path / "summary.md").read_text()
    assert f"- prompts: {fmt}" in md and "peak memory: RSS 1200 MiB" in md
    assert json.loads((tmp_path / "summary.json").read_text())["prompt_format"] == fmt
    # without the resolved format (an old caller) the configured one is named; no memory rows: said so
    from grpolab.train.report import figure_caption

    cap = figure_caption(cfg, [{"step": 1}])
    assert "task.chat_template=auto" in cap and "peak memory: not recorded" in cap
