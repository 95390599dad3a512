"""grpolab's run tools on a real MiniWoB++ run: train (per-task summary), headroom, diagnose, sweep, compare.

A tiny model on two one-step tasks, a few steps each, in the real browser (one browser per run).
Skipped with the reason when the browser is missing (``GRPOLAB_REQUIRE_BROWSER=1``: fails).
"""

import json
import os

import pytest

from grpolab.cli import main as cli_main
from grpolab.envs.miniwob import browser_status
from grpolab.train.metrics_log import read_metrics

pytestmark = [pytest.mark.browser, pytest.mark.slow]

REASON = browser_status()
if REASON is not None:
    if os.environ.get("GRPOLAB_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"GRPOLAB_REQUIRE_BROWSER=1 but the MiniWoB++ browser cannot run: {REASON}")
    pytest.skip(f"MiniWoB++ run tools need a browser: {REASON}", allow_module_level=True)

TASKS = ["click-test-2", "click-button"]
TINY_MINIWOB = f"""\
model: {{hidden_size: 32, num_layers: 2, num_heads: 2, intermediate_size: 64}}
task:
  name: miniwob
  n_train: 24
  n_eval: 8
  options: {{tasks: [{", ".join(TASKS)}], case: escape, elements: interactive, browsers: 1}}
env:
  name: miniwob
  max_turns: 2
  max_total_tokens: 48
  max_turn_tokens: 16
  options: {{browsers: 1}}
sft: {{max_steps: 4, eval_every: 2, batch_size: 8, n_eval: 4}}
rollout: {{prompts_per_step: 4, group_size: 4}}
trainer: {{steps: 2, eval_every: 1, save_every: 1, preflight: true}}
log: {{progress: false, plots: false, tensorboard: false}}
"""


@pytest.fixture(scope="module")
def miniwob_run(tmp_path_factory):
    """The config file and one trained run (items cached in a module-wide cache directory)."""
    root = tmp_path_factory.mktemp("miniwob_tools")
    mp = pytest.MonkeyPatch()
    mp.setenv("GRPOLAB_CACHE_DIR", str(root / "cache"))  # sweep/compare workers inherit it
    cfg = root / "tiny_miniwob.yaml"
    cfg.write_text(TINY_MINIWOB)
    run = root / "run"
    assert cli_main(["train", str(cfg), "--set", f"trainer.run_dir={run}"]) == 0
    yield cfg, run, root
    mp.undo()


def test_train_summary_has_the_per_task_table(miniwob_run):
    _, run, _ = miniwob_run
    assert [m["step"] for m in read_metrics(run)] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    rows = {r["task"]: r for r in summary["per_task"]}
    assert list(rows) == TASKS
    preflight = json.loads((run / "preflight.json").read_text())  # the pre-check is the preflight (issue 43)
    for task in TASKS:
        r = rows[task]
        assert r["n"] == 4  # 8 held-out items dealt round-robin over 2 tasks
        assert r["before"] in (0.0, 0.25, 0.5, 0.75, 1.0) and r["after"] in (0.0, 0.25, 0.5, 0.75, 1.0)
        fam = preflight["families"][f"family={task}"]
        assert r["headroom_verdict"] == fam["verdict"] and r["headroom_items"] == fam["n_items"] == 4
    overall = summary["accuracy"]
    assert overall["before_rl"] == pytest.approx(sum(rows[t]["before"] for t in TASKS) / 2)
    assert overall["final"] == pytest.approx(sum(rows[t]["after"] for t in TASKS) / 2)
    md = (run / "summary.md").read_text()
    assert all(f"| {t} | 4 | " in md for t in TASKS)


def test_preflight_and_diagnose_on_a_miniwob_run(miniwob_run):
    _, run, root = miniwob_run
    out = root / "preflight"
    assert cli_main(["preflight", str(run), "--n", "4", "--k", "2", "--no-readability", "--out", str(out)]) == 0
    h = json.loads((out / "preflight.json").read_text())
    assert h["stats"]["n_items"] == 4 and set(h["stats"]["pass_at_k_unbiased"]) == {"1", "2"}
    assert set(h["families"]) == {f"family={t}" for t in TASKS}  # measured as episodes, per task
    assert all(f["verdict"] for f in h["families"].values())
    assert cli_main(["diagnose", str(run), "--n", "4", "--probe", "4"]) == 0
    d = json.loads((run / "diagnose.json").read_text())
    assert {x["group"] for x in d["drift"]} >= {"embed", "attention", "mlp", "norm", "head"}
    assert set(d["causal"]["groups"]) == {"embed", "attention", "mlp", "norm", "head", "attention+mlp"}


def test_sweep_and_compare_on_miniwob(miniwob_run):
    cfg, _, root = miniwob_run
    fast = ["--set", "trainer.steps=1", "--set", "trainer.preflight=false"]
    sweep = root / "sweep"
    assert cli_main(["sweep", str(cfg), *fast, "--grid", "optim.lr=1e-4,1e-3", "--seeds", "1", "--jobs", "1",
                     "--out", str(sweep)]) == 0
    runs = sorted(p.name for p in (sweep / "runs").iterdir())
    assert runs == ["lr=1e-3,seed=0", "lr=1e-4,seed=0"]
    for r in runs:
        res = json.loads((sweep / "runs" / r / "result.json").read_text())
        assert res["steps"] == 1
        assert [t["task"] for t in json.loads((sweep / "runs" / r / "summary.json").read_text())["per_task"]] == TASKS
    md = (sweep / "summary.md").read_text()
    assert "| 1e-4 | 0 |" in md and "| 1e-3 | 0 |" in md
    cmp = root / "cmp"
    assert cli_main(["compare", str(cfg), *fast, "--vary", "optim.lr=1e-4,1e-3", "--seeds", "1", "--jobs", "1",
                     "--out", str(cmp), "--baseline", "1e-4"]) == 0
    res = json.loads((cmp / "comparison.json").read_text())
    assert res["baseline"] == "lr=1e-4"
    assert res["variants"]["lr=1e-3"]["seeds"] == [0]
    assert "final_minus_baseline" in res["variants"]["lr=1e-3"]
