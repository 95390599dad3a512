"""Calibrate `grpolab preflight` against real GRPO runs (issue 43).

For each setting (a model, a task setup and the standard short GRPO recipe for that model): run
the preflight on the starting model, then one GRPO run per seed, and measure each run's gain in
held-out greedy accuracy on the same held-out items (all of them up to ``--gain-items``, 256 by
default), paired by item against the starting model. The record is rewritten atomically after every
step, so a partial calibration survives an interruption; run the same command again to continue
(finished preflights, warm starts, runs and evaluations are reused).

    OMP_NUM_THREADS=1 python benchmarks/experiments/preflight_calibration.py --root runs/calib \\
        --json docs/results/preflight_calibration.json --seeds 0 1 2

The settings are visited seed by seed (every setting's seed 0 first, then seed 1, ...), so a
budget that runs out leaves many settings with one seed rather than a few with three.
``--recorded``: also add the settings whose gains come from earlier results in docs/results/
(their preflight verdict is computed from the recorded headroom numbers of that run by
:func:`grpolab.diagnostics.preflight.verdicts_from_counts`; no failure reasons there).

Agreement: the preflight's GRPO verdict ("indicated" = go, "not indicated" = no-go) against the sign
of the mean measured gain (a gain within +-``--null`` points counts as no gain, i.e. agrees with
no-go); "can't tell" settings are counted apart. Also: no "not indicated" where every seed gained
>= 10 points, and whether the measured gain lies at or below the preflight's gain ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grpolab import bench
from grpolab.bench import write_json

ROOT = Path(__file__).resolve().parents[2]
SMOL = "models/smollm2-135m-instruct"

# The standard short run of each model: SmolLM2 as examples/smollm2_sums.yaml (GRPO + LoRA r 16,
# lr 5e-4, 4 prompts x 8 at T 0.7, 10 steps, chat template); the tiny model as the headroom study
# (studies/headroom.yaml: 40 steps of 16 prompts x 8 at T 1, lr 1e-4) from a default warm start.
SMOL_BASE = ["examples/smollm2_sums.yaml", ["task.n_eval=16", "trainer.eval_every=10", "trainer.save_every=10",
                                            "log.completions_every=0", "log.plots=false", "log.progress=false"]]
TINY_RUN = ["rollout.prompts_per_step=16", "rollout.group_size=8", "rollout.max_new_tokens=48",
            "rollout.temperature=1.0", "optim.lr=1e-4", "trainer.steps=40", "trainer.eval_every=40",
            "trainer.save_every=40", "task.n_eval=32", "log.tensorboard=false", "log.plots=false",
            "log.progress=false", "sft.enabled=no"]

RG_CONFIG = "examples/smollm2_reasoning_gym.yaml"
#: how the reasoning-gym families were chosen, fixed before any model output on them (shown on the page)
RG_CRITERION = (
    "A reasoning-gym family fits a 135M model here when, at a configuration of its own knobs: (a) the answer is "
    "one integer of at most 4 digits (it fits the 32-token cap after '#' with room for a restated question); "
    "(b) the question asks for one elementary operation on what the prompt states (one multiplication, one "
    "count over a short text, one look-up-and-multiply), not a search, a chain of steps or a grid; (c) the "
    "family yields >= 200 distinct held-out questions; (d) it is not the sums or differences short_arith "
    "already covers. Meeting (a)-(d) in reasoning-gym 0.1.19: products (2 terms of 1-2 digits), "
    "letter_counting (defaults) and leg_counting (one kind of animal); rejected by (b): gcd, lcm and "
    "count_bits (a chain: Euclid's steps, a base conversion), chain_sum / basic_arithmetic beyond two terms; "
    "by (a): number_sorting and other list answers; by (d): chain_sum with two terms. All three were run, "
    "with nothing changed after the first preflight.")

#: the commit whose preflight rules the reasoning-gym settings were judged by (frozen before their runs)
RG_RULES_COMMIT = "5cc2a68"

SETTINGS: list[dict] = [
    {"name": "smollm2/sums0-20/cap12", "model": "SmolLM2-135M-Instruct",
     "task": "short_arith sums 0..20, 12-token cap (examples/smollm2_sums.yaml)", "set": [],
     "recorded": "docs/results/real_model.json"},
    {"name": "smollm2/sums0-20/cap32", "model": "SmolLM2-135M-Instruct", "task": "short_arith sums 0..20, 32-token cap",
     "set": ["rollout.max_new_tokens=32"]},
    {"name": "smollm2/sums0-50", "model": "SmolLM2-135M-Instruct", "task": "short_arith sums 0..50 (operand range)",
     "set": ["task.options.max_operand=50", "task.options.eval_fraction=0.2"]},
    {"name": "tiny/arith", "model": "tiny (1.8M, warm start)", "task": "arith (1-digit operands)", "tiny": "arith",
     "set": []},
    {"name": "tiny/arith3", "model": "tiny (1.8M, warm start)", "task": "arith, operands of up to 3 digits",
     "tiny": "arith", "set": ["task.options.max_digits=3"]},
    # the headroom study's two settings (docs/results/headroom.md), re-run here: its warm start, rebuilt with
    # the documented command, is bit-identical to a rebuild with the study's code (38e7aee) but not to the
    # model the study used (greedy 41 vs 46 of the same 128 items), so the recorded gains are not its gains
    {"name": "tiny/ws_arith/arith", "model": "tiny (1.8M, the headroom study's warm start, rebuilt)",
     "task": "arith as trained (1-digit operands)", "tiny": "arith", "start": "runs/ws_arith",
     "set": ["task.options.max_digits=1"]},
    {"name": "tiny/ws_arith/arith3", "model": "tiny (1.8M, the headroom study's warm start, rebuilt)",
     "task": "arith, operands of 1-3 digits", "tiny": "arith", "start": "runs/ws_arith",
     "set": ["task.options.max_digits=3"]},
    {"name": "smollm2/digits2+1", "model": "SmolLM2-135M-Instruct", "task": "short_arith 2-digit + 1-digit",
     "set": ["task.options.max_operand=null", "task.options.digits=[2,1]", "task.options.eval_fraction=0.2"]},
    {"name": "tiny/reverse", "model": "tiny (1.8M, warm start)", "task": "reverse", "tiny": "reverse", "set": []},
    {"name": "tiny/pairsum", "model": "tiny (1.8M, warm start)", "task": "pairsum (96 tokens)", "tiny": "pairsum",
     "set": ["rollout.max_new_tokens=96", "rollout.prompts_per_step=8"]},
    {"name": "smollm2/diff0-20", "model": "SmolLM2-135M-Instruct", "task": "short_arith differences 0..20",
     "set": ["task.options.ops='-'"]},
    {"name": "smollm2/sums0-20/number-only", "model": "SmolLM2-135M-Instruct",
     "task": "short_arith sums 0..20, 'Answer with the number only.'",
     "set": ["task.prompt_template={prompt} Answer with the number only."]},
    {"name": "smollm2/sums0-10", "model": "SmolLM2-135M-Instruct", "task": "short_arith sums 0..10 (operand range)",
     "set": ["task.options.max_operand=10"]},
    {"name": "smollm2/sums0-20/cap6", "model": "SmolLM2-135M-Instruct", "task": "short_arith sums 0..20, 6-token cap",
     "set": ["rollout.max_new_tokens=6"]},
    # tool-integrated reasoning (added 2026-12-05 18:15 UTC, before anything of it ran): the one built-in
    # multi-turn task of the tiny model with a GRPO recipe and a recorded gain (docs/results/envs_log.md:
    # +14 points on 3 seeds) -- its warm start and 20-step recipe as documented there, run here
    {"name": "tiny/tool_arith", "model": "tiny (2 layers, 128 wide; docs/results/envs_log.md's warm start)",
     "task": "tool_arith: calc(...) then answer(...), 3 turns, tool output masked (examples/tool_arith.yaml)",
     "tiny": "tool_arith", "config": "examples/tool_arith.yaml",
     "warm": ["--set", "model.hidden_size=128", "--set", "model.num_layers=2", "--set", "model.intermediate_size=256",
              "--set", "sft.batch_size=32", "--set", "sft.eval_every=40", "--set", "sft.n_eval=32", "--set",
              "sft.max_steps=600", "--set", "sft.lr=3e-3", "--set", "sft.select_on=heldout"],
     "set": ["sft.enabled=no", "trainer.steps=20", "trainer.eval_every=20", "trainer.save_every=20",
             "task.n_eval=64", "rollout.prompts_per_step=8", "rollout.group_size=8", "optim.lr=3e-4",
             "log.tensorboard=false", "log.plots=false", "log.progress=false"]},
    # reasoning-gym families, chosen by RG_CRITERION before any SmolLM2 output on them was seen (00:50 UTC
    # 2026-12-05); the recipe is examples/smollm2_reasoning_gym.yaml (the sums recipe, a 32-token cap)
    {"name": "smollm2/rg/products", "model": "SmolLM2-135M-Instruct", "config": RG_CONFIG,
     "task": "reasoning_gym products: one multiplication, 2 numbers of 1-2 digits", "set": []},
    {"name": "smollm2/rg/letter_counting", "model": "SmolLM2-135M-Instruct", "config": RG_CONFIG,
     "task": "reasoning_gym letter_counting: one letter in a 5-15-word text (defaults)",
     "set": ["task.options.name=letter_counting", "task.options.config={}"]},
    {"name": "smollm2/rg/leg_counting", "model": "SmolLM2-135M-Instruct", "config": RG_CONFIG,
     "task": "reasoning_gym leg_counting: 1-15 of one kind of animal",
     "set": ["task.options.name=leg_counting", "task.options.config={min_animals: 1, max_animals: 1}"]},
]


def _run(cmd: list[str], log_path: Path) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.time()
    with open(log_path, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    print(f"  [{time.time() - t0:.0f} s] {' '.join(cmd[:3])} ... -> rc {rc}", flush=True)
    if rc != 0:
        raise RuntimeError(f"command failed (rc {rc}), see {log_path}: {' '.join(cmd)}")


def _config(s: dict, root: Path) -> tuple[str | None, list[str]]:
    """``(config file, --set lines)`` of a setting's runs."""
    if "tiny" in s:
        start = ROOT / s["start"] if "start" in s else root / ("ws_" + s["tiny"])
        if "config" in s:  # a recipe of its own (its config and --set lines, not TINY_RUN)
            return s["config"], [f"model.path={start}", *s["set"]]
        return None, [f"task.name={s['tiny']}", f"model.path={start}", *TINY_RUN, *s["set"]]
    return s.get("config", SMOL_BASE[0]), [f"model.path={SMOL}", *SMOL_BASE[1], *s["set"]]


def _sets(lines: list[str]) -> list[str]:
    out = []
    for x in lines:
        out += ["--set", x]
    return out


def _cfg_args(cfg: str | None, sets: list[str]) -> list[str]:
    return ([cfg] if cfg else []) + _sets(sets)


def warm_start(task: str, root: Path, config: str | None = None, warm: list[str] = ()) -> Path:
    """The tiny model's warm start on ``task`` (``grpolab sft``, deterministic): the default one, or
    ``grpolab sft CONFIG`` with the setting's own ``warm`` arguments."""
    out = root / f"ws_{task}"
    if not (out / "sft.json").exists():
        args = [config, *warm] if config else ["--set", f"task.name={task}"]
        _run([sys.executable, "-m", "grpolab.cli", "sft", *args, "--out", str(out)], root / "logs" / f"ws_{task}.log")
    return out


def greedy_items(model: str, cfg: str | None, sets: list[str], n: int | None, out: Path, log: Path) -> list[float]:
    """Per-item greedy rewards of ``model`` on the setting's held-out items (cached in ``out``)."""
    if not out.exists():
        cmd = [sys.executable, "-m", "grpolab.cli", "eval", model, "--samples", "0", "--examples", "0",
               "--completions", str(out)]
        if cfg:
            cmd += ["--config", cfg]
        cmd += _sets([x for x in sets if not x.startswith("task.n_eval=")])
        try:
            _run(cmd + (["--n", str(n)] if n else []), log)
        except RuntimeError:
            import re

            m = re.search(r"has only (\d+) eval items", log.read_text()[-2000:])
            if not n or not m:
                raise
            _run(cmd + ["--n", m.group(1)], log)  # the task holds fewer held-out items: all of them
    return [json.loads(line)["reward"] for line in out.read_text().splitlines() if line.strip()]


def paired_gain(base: list[float], final: list[float]) -> dict:
    from grpolab.diagnostics.inference import mcnemar_items

    b = [float(x >= 1 - 1e-9) for x in base]
    f = [float(x >= 1 - 1e-9) for x in final]
    c = mcnemar_items(f, b)  # one run's items, paired: t interval over items and the exact McNemar p
    return {"start": sum(b) / len(b), "final": sum(f) / len(f), "gain": c.difference, "gain_ci": [c.low, c.high],
            "gain_p": c.p_value,
            "fixed": sum(1 for x, y in zip(b, f) if y > x), "broken": sum(1 for x, y in zip(b, f) if y < x),
            "items": len(b)}


def preflight(s: dict, base: str, cfg: str | None, sets: list[str], out: Path, log: Path, k: int) -> dict | None:
    try:
        import grpolab.measure.preflight  # noqa: F401
    except ImportError:
        return None
    if not (out / "preflight.json").exists():
        _run([sys.executable, "-m", "grpolab.cli", "preflight", base, *(["--config", cfg] if cfg else []),
              *_sets([x for x in sets if not x.startswith("task.n_eval=")]), "--n", str(k), "--out", str(out),
              "--until-decided", "32", "--no-readability"], log)
    return preflight_record(json.loads((out / "preflight.json").read_text()))


#: The pilot (``--pilot``): its seed (no calibration run uses it) and the held-out items it compares on
#: (the tiny model's preflight takes seconds; SmolLM2's minutes, so fewer items there).
PILOT_SEED = 7
PILOT_ITEMS = {"tiny": 256, "smollm2": 64}


#: The reading of the pilot results (written after they were seen).
PILOT_READING = """**Reading (written after the results).** Where the pilot is a quarter of a 10- or 40-step run of
SmolLM2 or the tiny model (15 settings), it sees what the starting model could not: tiny `pairsum`
(-7.8 points in the runs; pilot -3.3 [-7.0, +0.4]) turns "not indicated" and tiny `arith` (+1.2)
"can't tell", while every SmolLM2 `short_arith` setup that gained stays "indicated" (+1.8 to +59.0
points of sampled success after 3 steps). On these 15, 12 of 14 decided agree (86%). Its two misses are
the reasoning-gym families that gained on one seed in three (products +45.3, letter_counting +37.5,
both +0.0 on the other two seeds; the mean counts as a gain): the pilot's seed, like two of the three
run seeds, did not move success in 3 steps (0.008 -> 0.004 and 0 -> 0), although its training groups had
signal (2-3 of 4 groups per step with mixed rewards, mostly reasoning-gym's partial scores for a wrong
number). One pilot seed cannot predict a gain that one seed in three finds. On MiniWoB++ the pilot is
weak and, here, not reproducible: 30 of 120 steps of the multi-task run, read on 40 items per task,
leave 6 of 8 tasks "can't tell"; click-option (lost in the runs) reads "not indicated", and
focus-text-2, which gained +28.0 on average, lost 17.5 points of sampled success and reads "not
indicated". The same command with 100 items per task (above) trained a different pilot model from the
same seed, config and start -- focus-text-2 then gained +17.1 points of sampled success (greedy
0.560 -> 1.000) and reads "indicated"; its four decided tasks all agree. Checked afterwards
(2-step runs, seed 7, step rewards): a standalone `grpolab train studies/miniwob_gain.yaml` gives 0.500,
0.5781; the in-process pilots on 16 and on 800 items give exactly that, so a pilot is the seed's
run; the first pilot (320 items) gave 0.500, 0.6406 -- a different trajectory from step 2,
cause found afterwards: the update's mini-batch order came from torch's global stream, which greedy
evaluation draws from once per item (fixed; the third pilot below ran on the fixed code). Before that fix the held-out size also moved a
MiniWoB++ run: with `task.n_eval=8` the same standalone run gives 0.500, 0.5625 (twice the same; the tiny model's runs
do not move: its pilot equals its standalone run at every step). So on MiniWoB++ each of the first two pilots was one
draw of a trajectory that small, seemingly unrelated settings changed; the third ran on the fixed code
(yet two later 60-step pilots of it, differing only in the items measured, parted at step 29: a rarer
dependence is left, see the follow-up below) (click-link, -3.8 in the runs, reads "indicated" there: a miss). The warm start was rebuilt for this
(`grpolab sft examples/miniwob_choice.yaml --out runs/ws_ch50 --set sft.max_steps=50`, the constant
schedule's first 50 steps) and reproduced the recorded one: the same greedy success per task on the
same 40 items (0.500, 0.425, 0.450, 0.125, 0.450, 0.475, 0.425, 1.000). Over the 25 settings of then (before tiny/tool_arith) the
pilot's verdicts agree on more of those they decide (82%; 89% with the second MiniWoB++ pilot) but
decide fewer (56% of all settings agree, 68% with the second MiniWoB++ pilot, 68% with the
starting-model verdicts alone; 64% with the third, 16 of 19 decided): none reaches the 80%-of-settings
target."""


def pilot_steps(sets: list[str], cfg: str | None, fraction: float) -> tuple[int, int]:
    """``(ceil(fraction x the setting's trainer.steps), at least 1; the setting's trainer.steps)``."""
    import math

    from grpolab.config import load_config

    steps = load_config(str(ROOT / cfg) if cfg else None, sets).trainer.steps
    return max(1, math.ceil(fraction * steps)), steps


def pilot(base: str, cfg: str | None, sets: list[str], out: Path, log: Path, *, steps: int, items: int) -> dict:
    """``grpolab preflight --pilot STEPS`` on the starting model (seed :data:`PILOT_SEED`, ``items``
    held-out items, no early stop); the GRPO verdict after the pilot and the pilot's numbers."""
    if not (out / "preflight.json").exists():
        _run([sys.executable, "-m", "grpolab.cli", "preflight", base, *(["--config", cfg] if cfg else []),
              *_sets([x for x in sets if not x.startswith("task.n_eval=")] + [f"trainer.seed={PILOT_SEED}"]),
              "--n", str(items), "--out", str(out), "--no-readability", "--pilot", str(steps)], log)
    from grpolab.diagnostics.preflight import Pilot

    d = json.loads((out / "preflight.json").read_text())
    if d.get("pilot"):
        return {**Pilot.from_dict(d["pilot"]).record(), "seed": PILOT_SEED, "steps": steps, "skipped": False,
                **_pilot_run_facts(out / "pilot")}
    return {"verdict": d["verdict"], "start_verdict": d["verdict"], "n_items": d["stats"]["n_items"],
            "seed": PILOT_SEED, "steps": steps, "skipped": True}


def preflight_record(d: dict) -> dict:
    """A setting's preflight record from its ``preflight.json``, the verdicts recomputed from the stored
    statistics with the current rules (:func:`grpolab.diagnostics.preflight.method_table`)."""
    from grpolab.diagnostics.preflight import method_table

    methods = method_table(d["stats"])
    d["methods"] = [m.to_dict() for m in methods]
    rec = dict(d["calibration"])
    rec["grpo"] = methods[0].verdict
    rec["verdicts"] = {m.method: m.verdict for m in methods}
    st = d["settings"]
    rec.update({"seconds": st.get("seconds"), "stopped_when_decided": st.get("stopped_when_decided"),
                "rests_on": d["methods"][0]["rests_on"], "note": d["methods"][0]["note"],
                "failures": {r: (d["stats"]["responses"].get(r) or {}).get("value")
                             for r in ("cut at the cap", "no parseable answer", "wrong answer", "verifier error")}})
    return rec


#: Settings whose runs exist in docs/results/: the headroom numbers recorded before those runs (items,
#: greedy, pass@8) and the measured gains per seed. Their GRPO verdict is computed from the recorded
#: counts (no failure reasons were recorded), so it rests on pass@8 alone.
MINIWOB_CH50 = {  # docs/results/miniwob_log.md: 40 held-out items per task x 8 samples, runs/ws_ch50
    "click-tab": (0.50, 0.90), "click-link": (0.43, 0.83), "click-button": (0.45, 0.98),
    "click-option": (0.13, 0.38), "click-widget": (0.45, 0.95), "focus-text-2": (0.48, 0.93),
    "click-dialog-2": (0.43, 0.85), "click-test-transfer": (1.00, 1.00)}
TINY_HEADROOM = {  # docs/results/headroom.md: 128 held-out items x 8 samples, runs/ws_arith; finals on 256 items
    "arith (1-digit, as trained)": (46, 96, 0.375, [0.395, 0.434, 0.469, 0.422, 0.445]),
    "arith, 1-3 digits": (1, 3, 0.008, [0.004, 0.008, 0.000, 0.004, 0.008])}


def recorded_settings() -> list[dict]:
    """The settings of :data:`MINIWOB_CH50`, with verdicts from recorded counts. (The headroom study's
    :data:`TINY_HEADROOM` settings were recorded ones too until their warm start proved not rebuildable;
    they are run here now as ``tiny/ws_arith/*``, and the page compares them with the record.)"""
    from grpolab.diagnostics.preflight import verdicts_from_counts

    out = []
    paired = json.loads((ROOT / "docs/results/raw/miniwob_gain_paired_120.json").read_text())
    for task, (g, p8) in MINIWOB_CH50.items():
        seeds = paired_seeds(paired, task)
        out.append({"name": f"miniwob/recorded/{task}", "model": "tiny (MiniWoB++ warm start runs/ws_ch50)",
                    "task": f"MiniWoB++ {task} (real pages)",
                    "source": "recorded: docs/results/miniwob_log.md, raw/miniwob_gain_paired_120.json "
                              "(120 steps x 8 prompts, lr 1e-4, 3 seeds, 200 held-out seeds per task)",
                    "preflight": verdicts_from_counts(40, round(g * 40), round(p8 * 40), k=8),
                    "gain": {"seeds": seeds}})
    return out


def paired_seeds(paired: dict, task: str) -> dict:
    """One task's gain per seed from a ``benchmarks/experiments/miniwob_paired.py`` record (its models in seed
    order): start, final, gain, items, and the items fixed and broken."""
    seeds = {}
    for i, m in enumerate(paired["models"]):
        row = next(r for r in m["rows"] if r["task"] == task)
        seeds[str(i)] = {"start": row["start"], "final": row["trained"], "gain": row["trained"] - row["start"],
                         "items": row["n"], "fixed": row["gained"], "broken": row["lost"]}
    return seeds


#: The MiniWoB++ pilot: one ``grpolab preflight --pilot`` of the multi-task recipe (studies/miniwob_gain.yaml,
#: a quarter of its 120 steps) from the 50-step warm start, 40 held-out items per task; each task's
#: setting takes its task's verdict from the pilot's per-family table.
MINIWOB_PILOT = {"config": "studies/miniwob_gain.yaml", "steps": 30, "run_steps": 120, "items": 320}


#: Later MiniWoB++ pilots, each reported beside the first (which stays the pre-stated one): (the record's key
#: per setting, its directory under ROOT, the agreement's key, how it came about).
MINIWOB_MORE_PILOTS = [
    ("pilot_100_per_task", "miniwob_pilot800", "agreement_with_pilot_miniwob_100_per_task",
     "The second MiniWoB++ pilot (the same command with `--n 800`: 100 items per task, run after the first left 6 "
     "of 8 tasks \"can't tell\", as that verdict advises)"),
    ("pilot_200_per_task", "miniwob_pilot1600", "agreement_with_pilot_miniwob_200_per_task",
     "The third MiniWoB++ pilot (`--n 1600`: 200 items per task, run after the two causes of the irreproducible "
     "pilots were fixed -- see below -- at the item count the second pilot's \"can't tell\" rows advised; the "
     "first two ran on the code before the fix)"),
]


#: The follow-up of a "can't tell" pilot, stated before any follow-up ran (session of 2026-12-05, 17:3x UTC):
#: where a setting's latest pilot says "can't tell" -- the tiny settings' pilots (their tasks hold no more
#: items than were measured, so "--n" cannot follow the advice) and the tasks the 200-per-task MiniWoB++
#: pilot left undecided -- one more pilot of *half* the run's steps (the advice's "or pilot more steps"),
#: the same seed and items; its verdict stands, "can't tell" included. Counted as
#: ``agreement_with_follow_up``: the follow-up's verdict where one ran, else the latest pilot's (the
#: 200-per-task one on MiniWoB++), else the start's.
FOLLOW_UP = {"fraction": 0.5, "miniwob_dir": "miniwob_pilot1600_60", "miniwob_steps": 60, "miniwob_items": 1600,
             "after": "pilot_200_per_task"}


#: The second stage, stated after the MiniWoB++ follow-up's results (17:55 UTC) and before this one ran: where the
#: follow-up still says "can't tell" and the task holds the items its row advises (MiniWoB++: any number),
#: the same 60-step pilot measured on that many items per task (the largest advised figure, 483, rounded up
#: to 500 per task: 4000 items); its verdict stands. Reported as ``agreement_with_follow_up_items``, beside
#: (not in place of) the pre-stated follow-up.
FOLLOW_UP_ITEMS = {"miniwob_dir": "miniwob_pilot4000_60", "miniwob_items": 4000}


#: The MiniWoB++ rows re-measured on the fixed code, stated before any of it ran (session of 2026-12-05,
#: 20:28 UTC, commit 2a38b35). Every MiniWoB++ pilot and gain above predates the focus fix (4debce7); the gains
#: also predate the mini-batch-order fix (85dfef6), so they are draws of runs whose environment was not repeatable.
#: On today's code, from the rebuilt warm start runs/ws_ch50, seed 7 for every pilot:
#:   1. start and pilot: ``grpolab preflight runs/ws_ch50 --config studies/miniwob_gain.yaml --set
#:      trainer.seed=7 --n 1600 --no-readability --pilot 30`` (200 items per task: where the earlier pilots'
#:      advice ended; the start verdict per task comes from the same command's measurement);
#:   2. the follow-up (:data:`FOLLOW_UP`): the same command with ``--pilot 60``, read for the tasks 1 left
#:      "can't tell";
#:   3. where 2 still says "can't tell", :data:`FOLLOW_UP_ITEMS`'s second stage (``--n 4000 --pilot 60``),
#:      if the session's time allows it (else those tasks stay "can't tell");
#:   4. the gains: the documented sweep (``grpolab sweep studies/miniwob_gain.yaml --grid optim.lr=1e-4
#:      --seeds 3 --jobs 2``) and the paired test on 200 held-out seeds per task into
#:      docs/results/raw/miniwob_gain_paired_120_fixed.json.
#: These replace the eight MiniWoB++ rows' start verdict, pilot stages and gains in ``agreement_after_fixes``
#: (the 18 other settings unchanged), which becomes the headline whatever it shows; the pre-fix rows and
#: agreements stay in the record as they are.
MINIWOB_FIXED = {"pilot_dir": "miniwob_fixed_pilot1600", "follow_up_dir": "miniwob_fixed_pilot1600_60",
                 "items_dir": "miniwob_fixed_pilot4000_60",
                 "gains": "docs/results/raw/miniwob_gain_paired_120_fixed.json"}


#: A greedy-aware pilot rule, stated (20:32 UTC, 2026-12-05, commit c7905f7) before any result of
#: :data:`MINIWOB_FIXED` was known and reported beside the headline, not in it: where the last pilot stage that
#: ran (the stages themselves follow the headline rule) says "can't tell" on sampled success, its paired greedy
#: change decides with the same thresholds (indicated where its 95% interval is above 0, not indicated where it
#: is below +2 points). It was conceived on the pre-fix MiniWoB++ follow-up (click-button, click-widget: greedy
#: moved where sampled did not), so only the eight re-measured MiniWoB++ rows are a test of it.
def greedy_aware(p: dict) -> str:
    """A pilot stage's verdict under the greedy-aware rule (see above); the stage's own verdict where it decided
    or was skipped."""
    from grpolab.diagnostics.preflight import change_verdict

    if p.get("skipped") or p["verdict"] != "can't tell":
        return p["verdict"]
    return change_verdict(p["greedy_change"])


def miniwob_after_fixes(root: Path) -> dict[str, dict]:
    """Per MiniWoB++ task, :data:`MINIWOB_FIXED`'s re-measurement: the start's verdict (the pilot command's own
    measurement, 200 items per task), the pilot, the follow-up where the pilot said "can't tell", the second
    stage where the follow-up did too, and the gains per seed; empty until the pilot and the gains exist."""
    gains = ROOT / MINIWOB_FIXED["gains"]
    first = miniwob_pilot(root, None, MINIWOB_FIXED["pilot_dir"])
    if not first or not gains.exists():
        return {}
    paired = json.loads(gains.read_text())
    follow = miniwob_pilot(root, None, MINIWOB_FIXED["follow_up_dir"]) or {}
    more = miniwob_pilot(root, None, MINIWOB_FIXED["items_dir"]) or {}
    out = {}
    for task, p in first.items():
        rec = {"start_verdict": p["start_verdict"], "pilot": p, "gain": {"seeds": paired_seeds(paired, task)},
               "source": f"re-measured on the fixed code: {MINIWOB_FIXED['gains']}, runs/calib/"
                         f"{MINIWOB_FIXED['pilot_dir']}"}
        if p["verdict"] == "can't tell" and task in follow:
            rec["pilot_follow_up"] = {**follow[task], "steps": FOLLOW_UP["miniwob_steps"]}
            if follow[task]["verdict"] == "can't tell" and task in more:
                rec["pilot_follow_up_items"] = {**more[task], "steps": FOLLOW_UP["miniwob_steps"]}
        out[task] = rec
    return out


def _last_stage(s: dict, stages: list | None = None) -> dict | None:
    """The last of ``stages`` (default: all of :data:`FOLLOW_UP_STAGES`) that ran for ``s``, else its latest
    pilot."""
    stages = FOLLOW_UP_STAGES if stages is None else stages
    return next((s[k] for k, _ in reversed(stages) if s.get(k)), None) or _latest_pilot(s)


def after_fixes_view(s: dict) -> dict:
    """A setting as :data:`MINIWOB_FIXED` counts it: a re-measured MiniWoB++ row takes the re-measurement's start
    verdict, its last pilot stage's verdict and its gains; any other setting its last follow-up stage's verdict,
    else its latest pilot's (as ``agreement_with_follow_up_items``)."""
    a = s.get("after_fixes")
    if a:
        return {"name": s["name"], "preflight": {"grpo": a["start_verdict"]}, "pilot": _last_stage(a),
                "gain": a["gain"]}
    last = _last_stage(s)
    return {**s, "pilot": last} if last else s


def first_pilot_view(s: dict) -> dict:
    """A setting as ``agreement_after_fixes.first_pilot`` counts it: what ``grpolab preflight --pilot`` alone
    gives -- the first pilot stage (a quarter of the run's steps; on the re-measured MiniWoB++ rows the
    re-measurement's first pilot), no follow-up, no second stage."""
    a = s.get("after_fixes")
    if a:
        return {"name": s["name"], "preflight": {"grpo": a["start_verdict"]}, "pilot": a["pilot"], "gain": a["gain"]}
    return s


#: The reading of the follow-ups (written after their results).
FOLLOW_UP_READING = """**Reading (written after the results).** The longer pilot decided 2 of the 6 settings it ran on,
both rightly (`tiny/ws_arith/arith`, click-tab); tiny `arith` (+1.2 points in the runs, inside the
null band) stayed "can't tell" at 20 steps as at 10. Its MiniWoB++ rows show what the rule on sampled
success leaves out: greedy success moved on click-button (-10.0 points [-16.5, -3.5]; runs -2.0) and
click-widget (+9.0 [+2.0, +16.5]; runs +8.0) where sampled success did not. A rule that also reads a
decided greedy change would have got both right here, but it was not stated before, so it is not
counted. The second stage was meant to measure the same 60-step model on more items, and it did not:
its pilot's training matched the follow-up's through step 28 (every loss and gradient metric equal)
and its step-29 rollout differed, so it is another draw of a 60-step model (click-tab +5.5 there,
+25.4 in the follow-up). The cause, found afterwards: a click on a focus-text-2 textbox fired the page's focus
handler only sometimes (timing), and one such episode changes the random draws of all episodes sampled
with and after it; it also made two measurements of the same starting model differ in sampled success
(0.404 and 0.410 over 1600 items; greedy identical). Every tab now emulates focus and sampled measurements
repeat exactly (docs/miniwob.md); the MiniWoB++ pilots and gains here were all measured before that fix. Over all three stages 20 of 24 settings decided agree, 77% of all 26: below the
80% target. What is left: gains on one seed in three (reasoning-gym products, letter_counting: a
pilot reads "not indicated", as two of three runs would), and MiniWoB++ tasks that lost 2-4 points in
120-step multi-task runs (click-link, click-button) although a 30- or 60-step pilot raised their
sampled success. (Added later: the MiniWoB++ rows re-measured on the fixed code, [below](#the-miniwob-rows-re-measured-on-the-fixed-code).)"""


#: The follow-up stages in order: (the record's key per setting, the agreement's key).
FOLLOW_UP_STAGES = [("pilot_follow_up", "agreement_with_follow_up"),
                    ("pilot_follow_up_items", "agreement_with_follow_up_items")]


def follow_up_steps(run_steps: int) -> int:
    """The follow-up pilot's steps: :data:`FOLLOW_UP`'s fraction of the run's steps, at least 1."""
    import math

    return max(1, math.ceil(FOLLOW_UP["fraction"] * run_steps))


def _latest_pilot(s: dict) -> dict | None:
    """A setting's latest pilot before the follow-up: the 200-per-task one on MiniWoB++, else its pilot."""
    return s.get(FOLLOW_UP["after"]) or s.get("pilot")


def needs_follow_up(s: dict) -> bool:
    """Whether :data:`FOLLOW_UP` applies: the setting's latest pilot ran and said "can't tell"."""
    p = _latest_pilot(s)
    return bool(p) and not p.get("skipped") and p["verdict"] == "can't tell"


def miniwob_pilot(root: Path, start: str | None, name: str = "miniwob_pilot") -> dict | None:
    """The MiniWoB++ pilot's per-task records (``root/miniwob_pilot``; run from ``start``, the rebuilt
    50-step warm start, where missing: ``grpolab sft examples/miniwob_choice.yaml --out runs/ws_ch50 --set
    sft.max_steps=50``, a browser and grpolab[miniwob]); None where neither is there."""
    out = root / name
    if not (out / "preflight.json").exists():
        if name != "miniwob_pilot" or not start or not (ROOT / start).exists():
            return None
        _run([sys.executable, "-m", "grpolab.cli", "preflight", start, "--config", MINIWOB_PILOT["config"], "--set",
              f"trainer.seed={PILOT_SEED}", "--n", str(MINIWOB_PILOT["items"]), "--no-readability", "--pilot",
              str(MINIWOB_PILOT["steps"]), "--out", str(out)], root / "logs" / "miniwob_pilot.log")
    from grpolab.diagnostics.preflight import Pilot

    d = json.loads((out / "preflight.json").read_text())
    fams = Pilot.from_dict(d["pilot"]).record().get("families", {}) if d.get("pilot") else {}
    facts = _pilot_run_facts(out / "pilot")
    return {task.split("=", 1)[-1]: {**f, "seed": PILOT_SEED, "run_steps": MINIWOB_PILOT["run_steps"],  # "family=x"
                                     "skipped": False, "from": "the multi-task pilot", **facts}
            for task, f in fams.items()}


def _pilot_run_facts(run_dir: Path) -> dict:
    """The pilot run's prompt format and the peak RSS of the process (the preflight's measurement and the
    pilot's training ran in it), from its ``summary.json``."""
    d = json.loads((run_dir / "summary.json").read_text())
    rss = (d.get("health") or {}).get("peak_rss_mb")
    return {"prompt_format": d.get("prompt_format"), "peak_rss_mib": round(rss) if rss else None}


#: settings whose verdict rule was revised after their gain was seen (not out-of-sample tests)
IN_SAMPLE = {"smollm2/digits2+1"}


#: The keys of an agreement count that a subset's summary keeps.
COUNT_KEYS = ("settings_with_runs", "decided", "cant_tell", "agree_decided", "share_of_decided", "share_of_all")


def summarise(record: dict, null: float) -> None:
    """``agreement``, ``misses`` and the targets, from the settings as they stand; ``agreement`` also
    without the :data:`IN_SAMPLE` settings (``out_of_sample``); with pilots, ``agreement_with_pilot``
    (the pilot's verdict where one ran, the start's elsewhere; also on the piloted settings alone,
    with either verdict) and, with a second MiniWoB++ pilot, the count with it in place of the first."""
    settings = record["settings"]
    _summarise(record, null)
    oos, _ = _count([s for s in settings if s["name"] not in IN_SAMPLE], null)
    record["agreement"].update(out_of_sample={k: oos[k] for k in COUNT_KEYS}, in_sample_settings=sorted(IN_SAMPLE))
    record["threshold_bound"] = threshold_bound(record, null)
    piloted = [x for x in settings if x.get("pilot")]
    if not piloted:
        return
    agreement, misses = _count(settings, null, pilot=True)
    record["agreement_with_pilot"] = {
        **agreement, "misses": misses, "piloted_settings": len(piloted),
        "piloted_only": {k: v for k, v in _count(piloted, null, pilot=True)[0].items() if k in COUNT_KEYS},
        "piloted_only_start": {k: v for k, v in _count(piloted, null)[0].items() if k in COUNT_KEYS}}
    for key, _, agree_key, _ in MINIWOB_MORE_PILOTS:
        if any(x.get(key) for x in settings):
            swapped = [{**x, "pilot": x[key]} if x.get(key) else x for x in settings]
            agreement, misses = _count(swapped, null, pilot=True)
            record[agree_key] = {**agreement, "misses": misses}
    if any(x.get("after_fixes") for x in settings):
        view = [after_fixes_view(x) for x in settings]
        start, _ = _count(view, null)
        agreement, misses = _count(view, null, pilot=True)
        oos, _ = _count([v for v in view if v["name"] not in IN_SAMPLE], null, pilot=True)
        no_mw, _ = _count([v for v in view if not v["name"].startswith("miniwob/")], null, pilot=True)
        first, _ = _count([first_pilot_view(x) for x in settings], null, pilot=True)
        record["agreement_after_fixes"] = {**agreement, "misses": misses,
                                           "start": {k: start[k] for k in COUNT_KEYS},
                                           "first_pilot": {k: first[k] for k in COUNT_KEYS},
                                           "out_of_sample": {k: oos[k] for k in COUNT_KEYS},
                                           "without_miniwob": {k: no_mw[k] for k in COUNT_KEYS},
                                           "re_measured": sorted(x["name"] for x in settings if x.get("after_fixes"))}
        greedy = [{**v, "pilot": {**v["pilot"], "verdict": greedy_aware(v["pilot"])}} if v.get("pilot") else v
                  for v in view]
        agreement, misses = _count(greedy, null, pilot=True)
        mw, _ = _count([g for g, x in zip(greedy, settings) if x.get("after_fixes")], null, pilot=True)
        record["agreement_after_fixes_greedy_aware"] = {**agreement, "misses": misses,
                                                        "re_measured_only": {k: mw[k] for k in COUNT_KEYS}}
    # each follow-up stage: its verdict where it ran, else the stage before's, ..., else the latest pilot's
    for n, (key, agree_key) in enumerate(FOLLOW_UP_STAGES):
        if not any(x.get(key) for x in settings):
            continue
        swapped = [{**x, "pilot": _last_stage(x, FOLLOW_UP_STAGES[:n + 1])} if _latest_pilot(x) else x
                   for x in settings]
        agreement, misses = _count(swapped, null, pilot=True)
        record[agree_key] = {**agreement, "misses": misses, "followed_up": sorted(x["name"] for x in settings
                                                                                  if x.get(key))}


def _verdict(s: dict, pilot: bool) -> str:
    """The GRPO verdict a setting is counted with: the pilot's where asked and one ran, else the start's."""
    return s["pilot"]["verdict"] if pilot and s.get("pilot") else s["preflight"]["grpo"]


def _summarise(record: dict, null: float, pilot: bool = False) -> None:
    """``record['agreement']`` and ``record['misses']`` over all its settings (:func:`_count`)."""
    record["agreement"], record["misses"] = _count(record["settings"], null, pilot)


def _count(settings: list[dict], null: float, pilot: bool = False) -> tuple[dict, list[dict]]:
    """The agreement of the GRPO verdicts (the pilot's where ``pilot`` and one ran) with the sign of
    each setting's mean measured gain, and the misses; sets each setting's ``gain.final``."""
    rows = [s for s in settings if s.get("gain", {}).get("seeds") and s.get("preflight")]
    decided, agree, cant, misses = 0, 0, 0, []
    never_miss = True
    covered = n_cov = 0
    for s in rows:
        gains = [g["gain"] for g in s["gain"]["seeds"].values()]
        mean = sum(gains) / len(gains)
        s["gain"]["final"] = mean
        v = _verdict(s, pilot)
        sign = "up" if mean > null else ("down" if mean < -null else "none")
        if v == "not indicated" and gains and min(gains) >= 0.10:
            never_miss = False
            misses.append({"setting": s["name"], "why": f"'not indicated' but every seed gained >= 10 points "
                                                        f"({', '.join(f'{g:+.3f}' for g in gains)})"})
        if v == "can't tell":
            cant += 1
            continue
        decided += 1
        ok = (v == "indicated") == (sign == "up")
        agree += ok
        if not ok:
            misses.append({"setting": s["name"], "why": f"GRPO {v}, measured mean gain {mean:+.3f} "
                                                        f"({len(gains)} seed(s))"})
        ceil = s["preflight"].get("gain_ceiling")
        if ceil is not None:
            n_cov += 1
            covered += mean <= ceil + 1e-9
    return {
        "settings_with_runs": len(rows), "decided": decided, "cant_tell": cant,
        "agree_decided": agree, "share_of_decided": agree / decided if decided else None,
        "share_of_all": agree / len(rows) if rows else None,
        "never_not_indicated_where_all_seeds_gain_10pts": never_miss,
        "gain_at_or_below_ceiling": {"covered": covered, "settings": n_cov,
                                     "share": covered / n_cov if n_cov else None},
        "null_band_points": null * 100,
    }, misses


def figure(record: dict, png: Path) -> bool:
    """Predicted vs measured: the preflight's reachable share (x, its interval) against each setting's
    measured gain (y: mean of the seeds, the seeds as dots), coloured by the GRPO verdict."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colours = {"indicated": "tab:green", "not indicated": "tab:red", "can't tell": "tab:gray"}
    headline = any(s.get("after_fixes") for s in record["settings"])  # the headline's view: each last stage
    views = [after_fixes_view(s) for s in record["settings"]] if headline else record["settings"]
    piloted = [s for s in views if s.get("pilot") and not s["pilot"].get("skipped") and s.get("gain", {}).get("seeds")]
    fig, axes = plt.subplots(1, 2 if piloted else 1, figsize=(13 if piloted else 7, 5), squeeze=False)
    ax = axes[0][0]
    seen = set()
    for s in record["settings"]:
        pf, seeds = s.get("preflight"), [v["gain"] for v in s.get("gain", {}).get("seeds", {}).values()]
        if not pf or not seeds:
            continue
        x, (lo, hi) = pf["reachable"], pf["reachable_ci"]
        y = sum(seeds) / len(seeds)
        c = colours[pf["grpo"]]
        label = pf["grpo"] if pf["grpo"] not in seen else None
        seen.add(pf["grpo"])
        marker = "s" if s["name"].startswith("miniwob") else ("^" if s["name"].startswith("tiny") else "o")
        ax.errorbar([x], [y], xerr=[[x - lo], [hi - x]], fmt=marker, color=c, label=label, capsize=2)
        ax.scatter([x] * len(seeds), seeds, s=8, color=c, alpha=0.5)
        ax.annotate(s["name"].split("/")[-1], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    ax.axhline(0, color="black", lw=0.5)
    ax.plot([0, 1], [0, 1], ls=":", color="gray", lw=0.8, label="gain = reachable")
    ax.set_xlabel("preflight: reachable share of held-out items (95% Wilson interval)")
    ax.set_ylabel("measured gain in held-out greedy accuracy")
    ax.set_title("grpolab preflight vs measured GRPO gain (o SmolLM2, ^ tiny, s MiniWoB++)", fontsize=9)
    ax.legend(fontsize=7)
    if piloted:  # the pilot: its paired change in sampled success (x) against the runs' measured gain (y)
        bx = axes[0][1]
        seen = set()
        for s in piloted:
            p, seeds = s["pilot"], [v["gain"] for v in s["gain"]["seeds"].values()]
            c = p["sampled_change"]
            y = sum(seeds) / len(seeds)
            col = colours[p["verdict"]]
            label = p["verdict"] if p["verdict"] not in seen else None
            seen.add(p["verdict"])
            marker = "s" if s["name"].startswith("miniwob") else ("^" if s["name"].startswith("tiny") else "o")
            bx.errorbar([c["value"]], [y], xerr=[[c["value"] - c["low"]], [c["high"] - c["value"]]], fmt=marker,
                        color=col, label=label, capsize=2)
            bx.scatter([c["value"]] * len(seeds), seeds, s=8, color=col, alpha=0.5)
            bx.annotate(s["name"].split("/")[-1], (c["value"], y), fontsize=6, xytext=(3, 3),
                        textcoords="offset points")
        bx.axhline(0, color="black", lw=0.5)
        bx.axvline(0, color="black", lw=0.5)
        bx.axvline(0.02, color="gray", lw=0.5, ls=":")
        bx.set_xlabel(("the last pilot stage that ran" if headline else "pilot (a quarter of the run's steps)")
                      + ", another seed: change in sampled success, 95% CI")
        bx.set_ylabel("measured gain in held-out greedy accuracy")
        bx.set_title("--pilot vs measured GRPO gain" + (" (MiniWoB++ re-measured on the fixed code)" if headline
                                                        else " (o SmolLM2, ^ tiny, s MiniWoB++)"), fontsize=9)
        bx.legend(fontsize=7)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return True


#: The preflight's numbers a one-threshold go/no-go rule could read (``preflight`` keys; a pair = difference).
THRESHOLD_STATS = {"greedy": "greedy", "pass@k": "pass_at_k", "reachable": "reachable",
                   "pass@k - greedy": ("pass_at_k", "greedy"), "a sample solves": "sample_solves",
                   "answer in a failed response": "answer_in_failure", "all-equal groups": "all_equal"}


def threshold_bound(record: dict, null: float) -> list[dict]:
    """Per statistic of :data:`THRESHOLD_STATS`: the best agreement any one-threshold rule on it
    ("go where stat >= t" or "go where stat < t") reaches with the sign of the measured mean gain,
    the threshold chosen *on these same settings* -- an in-sample upper bound, not a rule: if it
    stays under the target, no single number the preflight reports can reach it here."""
    out = []
    for label, key in THRESHOLD_STATS.items():
        pts = []
        for st in record["settings"]:
            pf, seeds = st.get("preflight") or {}, st.get("gain", {}).get("seeds") or {}
            if not seeds or not pf:
                continue
            val = (pf.get(key[0]) is not None and pf.get(key[1]) is not None and pf[key[0]] - pf[key[1]]) \
                if isinstance(key, tuple) else pf.get(key)
            if val is None or val is False:
                continue
            gains = [g["gain"] for g in seeds.values()]
            pts.append((float(val), sum(gains) / len(gains) > null))
        if not pts:
            continue
        best = (-1, None, None)
        for t in sorted({v for v, _ in pts}) + [float("inf")]:
            for above in (True, False):
                agree = sum(((v >= t) if above else (v < t)) == up for v, up in pts)
                if agree > best[0]:
                    best = (agree, t, above)
        out.append({"statistic": label, "settings": len(pts), "best_agree": best[0], "share": best[0] / len(pts),
                    "rule": f"go where {label} {'>=' if best[2] else '<'} {best[1]:.3f}"})
    return out


def _agrees(verdict: str, mean: float, null: float) -> str:
    """The page's "agrees" cell: "-" for "can't tell", else whether go/no-go matches a mean gain above ``null``."""
    return "-" if verdict == "can't tell" else ("yes" if (verdict == "indicated") == (mean > null) else "**no**")


def _ci(c: dict) -> str:
    """A paired change and its interval in points: ``+4.1 [+3.1, +5.3]``."""
    return f"{c['value'] * 100:+.1f} [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def pilot_section(record: dict) -> str:
    """The page's pilot section: per piloted setting the start's and the pilot's verdict, the paired
    changes and the measured gain; the agreement with the pilot's verdicts."""
    piloted = [s for s in record["settings"] if s.get("pilot")]
    if not piloted:
        return "(no pilots run: `--pilot FRACTION`)"
    wp = record.get("agreement_with_pilot", {})
    rows = ["| setting | pilot steps (of the run's) | items x k | prompts | peak RSS (MiB) | verdict before | "
            "sampled success: change [95% CI] | greedy: change [95% CI] | verdict after | measured mean gain "
            "| agrees |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    null = record.get("agreement", {}).get("null_band_points", 2.0) / 100
    for s in piloted:
        p, g = s["pilot"], [v["gain"] for v in s.get("gain", {}).get("seeds", {}).values()]
        mean = sum(g) / len(g) if g else None
        agree = "-" if mean is None else _agrees(p["verdict"], mean, null)
        rows.append(f"| {s['name']} | {p['steps']} of {p.get('run_steps', '-')} | {p['n_items']} x 8 | "
                    f"{p.get('prompt_format') or '-'} | {p.get('peak_rss_mib') or '-'} | {p['start_verdict']} | "
                    + ("skipped (not indicated before)" if p.get("skipped") else _ci(p["sampled_change"])) + " | "
                    + ("-" if p.get("skipped") else _ci(p["greedy_change"])) + f" | **{p['verdict']}** | "
                    + ("-" if mean is None else f"{mean * 100:+.1f}") + f" | {agree} |")
    po, ps = wp.get("piloted_only", {}), wp.get("piloted_only_start", {})
    never = "met" if wp.get("never_not_indicated_where_all_seeds_gain_10pts") else "NOT met"
    return "\n".join(rows) + f"""

On the {po.get('settings_with_runs')} piloted settings: before the pilot, {ps.get('agree_decided')} of
{ps.get('decided')} decided agreed ({_pct(ps.get('share_of_decided'))}; {_pct(ps.get('share_of_all'))} of all);
after it, **{po.get('agree_decided')} of {po.get('decided')} decided ({_pct(po.get('share_of_decided'))})**, "can't
tell" on {po.get('cant_tell')} ({_pct(po.get('share_of_all'))} of all agree). "verdict before" is the pilot's own
measurement of the starting model on its items (the table above has the calibration's). Over all {wp.get('settings_with_runs')}
settings, with the pilot's verdict where one ran and the start's elsewhere: **{wp.get('agree_decided')} of
{wp.get('decided')} decided ({_pct(wp.get('share_of_decided'))})**, {_pct(wp.get('share_of_all'))} of all; never
"not indicated" where every seed gained >= 10 points: **{never}**.
Misses with the pilot: {'; '.join(m['setting'] + ' (' + m['why'] + ')' for m in wp.get('misses', [])) or 'none'}.""" + _more_pilots(record, null) + _follow_up_section(record, null)


def _more_pilots(record: dict, null: float) -> str:
    """The later MiniWoB++ pilots (:data:`MINIWOB_MORE_PILOTS`): a table each and the agreement with it."""
    out = []
    for key, _, agree_key, intro in MINIWOB_MORE_PILOTS:
        rows = [s for s in record["settings"] if s.get(key)]
        if not rows:
            continue
        alt = record.get(agree_key, {})
        out += ["", "", intro + ":", "",
                "| task | verdict before | sampled success: change [95% CI] | greedy: change [95% CI] | verdict after | "
                "measured mean gain | agrees |", "|---|---|---|---|---|---|---|"]
        for s in rows:
            p, g = s[key], [v["gain"] for v in s["gain"]["seeds"].values()]
            mean = sum(g) / len(g)
            agree = _agrees(p["verdict"], mean, null)
            out.append(f"| {s['name'].split('/')[-1]} | {p['start_verdict']} | {_ci(p['sampled_change'])} | "
                       f"{_ci(p['greedy_change'])} | **{p['verdict']}** | {mean * 100:+.1f} | {agree} |")
        out += ["", f"With it in place of the first: **{alt.get('agree_decided')} of {alt.get('decided')} decided "
                    f"({_pct(alt.get('share_of_decided'))})**, {_pct(alt.get('share_of_all'))} of all "
                    f"{alt.get('settings_with_runs')} "
                    f"settings; misses: {'; '.join(m['setting'] for m in alt.get('misses', [])) or 'none'}."]
    return "\n".join(out)


def _follow_up_section(record: dict, null: float) -> str:
    """The follow-ups of "can't tell" pilots (:data:`FOLLOW_UP`, :data:`FOLLOW_UP_ITEMS`): a row each and the
    agreement with them."""
    from grpolab.diagnostics.preflight import items_to_decide

    rows = [s for s in record["settings"] if s.get("pilot_follow_up")]
    if not rows:
        return ""
    out = ["", "", "### Following the advice: a longer pilot where the latest said \"can't tell\"", "",
           "Stated before any ran (`FOLLOW_UP` in the script, commit e32220d): where a setting's latest pilot said "
           "\"can't tell\" (the tiny tasks hold no more items than were measured, so only the advice's \"or pilot "
           "more steps\" can be followed; on MiniWoB++ the tasks the 200-per-task pilot left undecided), one more "
           f"pilot of {FOLLOW_UP['fraction']:.0%} of the run's steps, the same seed and items; its verdict stands, "
           "\"can't tell\" included. On MiniWoB++ it is one multi-task pilot of "
           f"{FOLLOW_UP['miniwob_steps']} steps on {FOLLOW_UP['miniwob_items']} items (200 per task), read for those "
           "tasks only.", "",
           "| setting | latest pilot: steps, sampled change [95% CI] | follow-up: steps, sampled change [95% CI] | "
           "greedy change [95% CI] | verdict | measured mean gain | agrees |", "|---|---|---|---|---|---|---|"]
    for s in rows:
        p0, p = _latest_pilot(s), s["pilot_follow_up"]
        g = [v["gain"] for v in s["gain"]["seeds"].values()]
        mean = sum(g) / len(g)
        agree = _agrees(p["verdict"], mean, null)
        out.append(f"| {s['name']} | {p0['steps']}, {_ci(p0['sampled_change'])} | {p['steps']}, "
                   f"{_ci(p['sampled_change'])} | {_ci(p['greedy_change'])} | **{p['verdict']}** | {mean * 100:+.1f} | "
                   f"{agree} |")
    a = record.get("agreement_with_follow_up", {})
    out += ["", f"With the follow-ups (their verdict where one ran, else the latest pilot's, else the start's): "
                f"**{a.get('agree_decided')} of {a.get('decided')} decided ({_pct(a.get('share_of_decided'))}), "
                f"{_pct(a.get('share_of_all'))} of all {a.get('settings_with_runs')} settings**; "
                f"{a.get('cant_tell')} can't tell; misses: "
                f"{'; '.join(m['setting'] for m in a.get('misses', [])) or 'none'}."]
    rows = [s for s in record["settings"] if s.get("pilot_follow_up_items")]
    if rows:
        out += ["", "A second stage, stated after the follow-up's results and before it ran (`FOLLOW_UP_ITEMS`): "
                    "where the follow-up still said \"can't tell\", the same "
                    f"{FOLLOW_UP['miniwob_steps']}-step pilot measured on the items its row advised (the largest "
                    f"figure rounded up: {FOLLOW_UP_ITEMS['miniwob_items']} items, "
                    f"{FOLLOW_UP_ITEMS['miniwob_items'] // 8} per task):", "",
                "| setting | advised | items | sampled change [95% CI] | greedy change [95% CI] | verdict | "
                "measured mean gain | agrees |", "|---|---|---|---|---|---|---|---|"]
        for s in rows:
            p0, p = s["pilot_follow_up"], s["pilot_follow_up_items"]
            g = [v["gain"] for v in s["gain"]["seeds"].values()]
            mean = sum(g) / len(g)
            need = items_to_decide(p0["sampled_change"], p0["n_items"])
            agree = _agrees(p["verdict"], mean, null)
            out.append(f"| {s['name']} | {f'{need[0]} ({need[1]})' if need else '-'} | {p['n_items']} | "
                       f"{_ci(p['sampled_change'])} | {_ci(p['greedy_change'])} | **{p['verdict']}** | "
                       f"{mean * 100:+.1f} | {agree} |")
        b = record.get("agreement_with_follow_up_items", {})
        out += ["", f"With it: **{b.get('agree_decided')} of {b.get('decided')} decided "
                    f"({_pct(b.get('share_of_decided'))}), {_pct(b.get('share_of_all'))} of all "
                    f"{b.get('settings_with_runs')} settings**; {b.get('cant_tell')} can't tell; misses: "
                    f"{'; '.join(m['setting'] for m in b.get('misses', [])) or 'none'}."]
    return "\n".join(out + ["", FOLLOW_UP_READING])


#: The reading of the re-measurement (written after its results).
AFTER_FIXES_READING = """**Reading (written after the results).** With the MiniWoB++ rows re-measured as stated, the go/no-go
verdict agrees with the sign of the measured gain on 85% of all 26 settings (22 of 24 decided): the
target is met, with the pilot stages -- from the starting model alone it is 73%. All seven decided
MiniWoB++ tasks agree. The text-matching tasks, misses before, read "can't tell" after 30 steps and "not
indicated" after 60 (click-link -7.8, click-button -3.2, click-option -2.1 points of sampled success), and
their runs on the fixed code are flat or down (-3.2, +0.2, -3.8); click-widget (+9.7, up on every seed)
stays "can't tell" through the second stage (sampled +1.8 [-0.7, +4.3] on 500 items, about 1,000 would
decide; greedy +5.0 [+0.0, +10.2], so the greedy-aware rule does not decide it either -- it changed no
re-measured verdict, and is neither confirmed nor refuted here). Whether the fix or the draw turned the
text-matching pilots around cannot be told from one pilot seed: before the fix, pilots of the same length
raised click-link's and click-button's sampled success, and the fix made a trajectory repeatable, not less
variable from seed to seed. The two misses left are the reasoning-gym families that gained on one seed in
three (products, letter_counting: the pilot reads "not indicated", as two of three runs would). Cost: on
MiniWoB++ the chain cost about what the runs it predicts cost -- the 200-per-task pilot 16 minutes, the
follow-up 17, the 500-per-task second stage 39 (each measurement plays 12,800 to 32,000 episodes), against
26 minutes for the 3-seed study -- so there the pilot answers "is this recipe worth a long run", not "is it
worth 3 short ones". Repeatability at scale, checked on these runs: the follow-up's measurement of the
starting model equals the first pilot's item by item (1,600 items x 8), the follow-up's first 30 steps equal
the 30-step pilot's in all 53 logged training metrics, and the second stage's 60 steps equal the follow-up's
and end in bit-identical weights (before the fix two such pilots parted at step 29)."""


def after_fixes_section(record: dict) -> str:
    """The page's section on :data:`MINIWOB_FIXED`: per task the re-measured start, pilot stages and gains beside
    the pre-fix gains, and the agreement with them (``agreement_after_fixes``)."""
    rows = [s for s in record["settings"] if s.get("after_fixes")]
    if not rows:
        return ""
    stage = lambda p: "-" if not p else ("skipped" if p.get("skipped") else  # noqa: E731
                                         f"{_ci(p['sampled_change'])}: {p['verdict']}")
    null = record.get("agreement", {}).get("null_band_points", 2.0) / 100
    out = ["## The MiniWoB++ rows re-measured on the fixed code", "",
           "Every MiniWoB++ pilot and gain above was measured before the focus fix (docs/miniwob.md), the gains also "
           "before the mini-batch-order fix, i.e. on an environment whose episodes did not repeat. Stated before any "
           "of it ran (`MINIWOB_FIXED` in the script, commit 2a38b35): start and pilot from one `grpolab preflight "
           "runs/ws_ch50 --config studies/miniwob_gain.yaml --set trainer.seed=7 --n 1600 --no-readability --pilot "
           "30` (200 items per task), the 60-step follow-up where it said \"can't tell\", the second stage (4000 "
           "items) where that did too, and the gains from the documented sweep (3 seeds x 120 steps) on 200 "
           "held-out seeds per task; these replace the eight rows in the count below, which is the headline. The "
           "commands (about 100 minutes on 2 cores; the warm start: `grpolab sft examples/miniwob_choice.yaml --out "
           "runs/ws_ch50 --set sft.max_steps=50`):", "", "```bash",
           "P='grpolab preflight runs/ws_ch50 --config studies/miniwob_gain.yaml --set trainer.seed=7 --no-readability'",
           f"$P --n 1600 --pilot 30 --out runs/calib/{MINIWOB_FIXED['pilot_dir']}",
           f"$P --n 1600 --pilot 60 --out runs/calib/{MINIWOB_FIXED['follow_up_dir']}",
           f"$P --n 4000 --pilot 60 --out runs/calib/{MINIWOB_FIXED['items_dir']}   # read where the follow-up said can't tell",
           "grpolab sweep studies/miniwob_gain.yaml --grid optim.lr=1e-4 --seeds 3 --jobs 2 --out runs/miniwob_gain_fixed",
           "python benchmarks/experiments/miniwob_paired.py --config studies/miniwob_gain.yaml --per-task 200 "
           f"--start runs/ws_ch50 --out {MINIWOB_FIXED['gains']} runs/miniwob_gain_fixed/runs/lr=1e-4,seed=*/final",
           "```", "",
           "| task | start (200 items x 8) | pilot, 30 steps: sampled change [95% CI] | follow-up, 60 steps | "
           "second stage, 4000 items | gain per seed (fixed code) | mean | mean before the fixes | agrees |",
           "|---|---|---|---|---|---|---|---|---|"]
    for s in rows:
        a = s["after_fixes"]
        g = [v["gain"] for v in a["gain"]["seeds"].values()]
        mean = sum(g) / len(g)
        agree = _agrees(_verdict(after_fixes_view(s), pilot=True), mean, null)
        out.append(f"| {s['name'].split('/')[-1]} | {a['start_verdict']} | {stage(a['pilot'])} | "
                   f"{stage(a.get('pilot_follow_up'))} | {stage(a.get('pilot_follow_up_items'))} | "
                   f"{', '.join(f'{x * 100:+.1f}' for x in g)} | **{mean * 100:+.1f}** | "
                   f"{s['gain']['final'] * 100:+.1f} | {agree} |")
    f = record.get("agreement_after_fixes", {})
    st = f.get("start", {})
    out += ["", f"Over all {f.get('settings_with_runs')} settings, the eight re-measured rows with their last stage's "
                f"verdict and the 18 others as in the last follow-up stage above: **{f.get('agree_decided')} of "
                f"{f.get('decided')} decided ({_pct(f.get('share_of_decided'))}), {_pct(f.get('share_of_all'))} of all "
                f"settings**; {f.get('cant_tell')} can't tell; misses: "
                f"{'; '.join(m['setting'] for m in f.get('misses', [])) or 'none'}. With the starting model's "
                f"verdicts alone (the re-measured start on MiniWoB++): {st.get('agree_decided')} of "
                f"{st.get('decided')} decided, {_pct(st.get('share_of_all'))} of all."]
    for key, what in (("out_of_sample", "without `smollm2/digits2+1` (its rule was revised after its gain was seen)"),
                      ("without_miniwob", "without the eight MiniWoB++ rows (tasks of one multi-task run, so not "
                                          "independent of each other)")):
        c = f.get(key)
        if c:
            out[-1] += (f" {what[0].upper() + what[1:]}: {c['agree_decided']} of {c['decided']} decided, "
                        f"{_pct(c['share_of_all'])} of all {c['settings_with_runs']}.")
    gr = record.get("agreement_after_fixes_greedy_aware")
    if gr:
        r = gr["re_measured_only"]
        out += ["", "Beside it, the greedy-aware rule (`greedy_aware`, stated before these results, conceived on the "
                    "pre-fix MiniWoB++ follow-up, so tested only by the eight re-measured rows): where the last stage "
                    "that ran says \"can't tell\" on sampled success, its greedy change decides with the same "
                    "thresholds. On the "
                    f"re-measured rows: {r['agree_decided']} of {r['decided']} decided, {r['cant_tell']} can't tell; "
                    f"over all settings {gr['agree_decided']} of {gr['decided']} decided, "
                    f"{_pct(gr['share_of_all'])} of all (not the headline)."]
    out.append("")
    return "\n".join(out + ([AFTER_FIXES_READING, ""] if AFTER_FIXES_READING else [])) + "\n"


def ws_arith_section(record: dict) -> str:
    """The headroom study's two settings: what docs/results/headroom.md recorded beside the re-run here."""
    by = {x["name"]: x for x in record["settings"]}
    rows = []
    for (task, (n_g, n_p, start, finals)), name in zip(TINY_HEADROOM.items(),
                                                        ("tiny/ws_arith/arith", "tiny/ws_arith/arith3")):
        x = by.get(name)
        if not x:
            continue
        st = x.get("preflight", {}).get("stats") or {}
        gains = [v["gain"] for v in x["gain"]["seeds"].values()]
        rows.append(f"| {task} | {n_g}/128, {n_p}/128 | {', '.join(f'{f - start:+.3f}' for f in finals)} | "
                    f"{x['preflight']['grpo']} | {x.get('pilot', {}).get('verdict', '-')} | "
                    f"{', '.join(f'{g:+.3f}' for g in gains) or '-'} |")
    if not rows:
        return ""
    return "\n".join([
        "## The headroom study's settings, re-run here", "",
        "docs/results/headroom.md's two settings (arith as trained and with operands of 1-3 digits, one warm "
        "start) were recorded settings until this calibration tried to pilot them: their warm start "
        "(`runs/ws_arith`), rebuilt with the documented command (`grpolab sft --set sft.target_accuracy=0.3 --set "
        "sft.n_eval=128 --set sft.eval_every=50 --set sft.ema=0 --set sft.select_on=heldout --set sft.lr=3e-3 "
        "--out runs/ws_arith`), is bit-identical to a rebuild with the study's own code (commit 38e7aee) but is "
        "not the model the study trained from: on the study's 128 items it solves 41 greedily and 94 at pass@8 "
        "where the record says 46 and 96 (both codes give 41 and 94 on the same items; why the study's model "
        "differed was not traced). The recorded gains are then not this model's, so both settings were replaced by "
        "`tiny/ws_arith/*`: preflight, pilot and 3 seeds of `studies/headroom.yaml`'s recipe, run here from the "
        "rebuilt warm start before its gains were known (the recorded 5 seeds are kept here for comparison, not "
        "counted).", "",
        "| task | recorded: greedy, pass@8 (128 items) | recorded gain per seed | verdict here (start) | "
        "after the pilot | gain per seed here |", "|---|---|---|---|---|---|", *rows])


def page(record: dict, md: Path, png: Path) -> None:
    """The results page: the table of settings, the agreement, the misses, the figure."""
    a = record.get("agreement", {})
    rows = ["| setting | model | source | GRPO verdict | rests on (items) | greedy | pass@k | reachable [95% CI] | "
            "cut at cap | all-equal | gain per seed | mean gain |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for s in record["settings"]:
        pf, seeds = s.get("preflight") or {}, s.get("gain", {}).get("seeds", {})
        g = [v["gain"] for v in seeds.values()]
        src = "run here" if s.get("source", "").startswith(("run here", "preflight run here")) else "recorded"
        if s.get("source", "").startswith("preflight run here"):
            src = "preflight here, runs recorded"
        rows.append(f"| {s['name']} | {s['model']} | {src} | {pf.get('grpo', 'not run')} | {pf.get('n_items', '-')} | "
                    f"{f(pf.get('greedy'))} | {f(pf.get('pass_at_k'))} | "
                    + (f"{pf['reachable']:.3f} [{pf['reachable_ci'][0]:.3f}, {pf['reachable_ci'][1]:.3f}]"
                       if pf.get("reachable") is not None else "-")
                    + f" | {f(pf.get('cut'))} | {f(pf.get('all_equal'))} | "
                    + (", ".join(f"{x:+.3f}" for x in g) or "not run") + " | "
                    + (f"**{sum(g) / len(g):+.3f}**" if g else "-") + " |")
    misses = "\n".join(f"- {m['setting']}: {m['why']}" for m in record.get("misses", [])) or "- none"
    reach = [b for b in record.get("threshold_bound", []) if b["share"] >= 0.8]
    bound_reading = ("No one-threshold rule reaches 80% even with its threshold fitted here: the misses are not a "
                     "threshold away." if not reach else
                     "Only " + "; ".join(f"{b['statistic']} ({b['best_agree']} of {b['settings']}, `{b['rule']}`)"
                                         for b in reach)
                     + " reaches 80%, on the settings that measured it (not the MiniWoB++ ones, whose records "
                       "predate it), with its threshold fitted on them. Over all settings no statistic reaches 80%.")
    bound = "\n".join(f"| {b['statistic']} | {b['settings']} | {b['best_agree']} ({b['share']:.0%}) | `{b['rule']}` |"
                      for b in record.get("threshold_bound", []))
    pic = f"![predicted vs measured]({os.path.relpath(png, md.parent)})" if png.exists() else "(no figure)"
    wp = record.get("agreement_with_pilot") or {}
    follow_up_lines = ""
    for key, what in (("agreement_with_follow_up", "following a can't-tell pilot's advice with a longer pilot "
                                                   "(stated before it ran)"),
                      ("agreement_with_follow_up_items", "then measuring the longer pilot on the items its rows "
                                                         "advised (a second stage, stated after the first's results)")):
        f = record.get(key)
        if f:
            follow_up_lines += (f"\n- {what[0].upper() + what[1:]} ([below](#following-the-advice-a-longer-pilot-"
                                f"where-the-latest-said-cant-tell)): {f['agree_decided']} of {f['decided']} decided "
                                f"({f['share_of_decided']:.0%}), **{f['share_of_all']:.0%} of all settings**.")
    fx = record.get("agreement_after_fixes")
    after_fixes_line = "" if not fx else (
        f"- **Headline, with the MiniWoB++ rows re-measured on the fixed code** ([below](#the-miniwob-rows-re-measured-"
        f"on-the-fixed-code)): {fx['agree_decided']} of {fx['decided']} decided ({fx['share_of_decided']:.0%}), "
        f"**{fx['share_of_all']:.0%} of all {fx['settings_with_runs']} settings** (target >= 80%). The counts below "
        "it are the pre-fix record, kept as it was.\n")
    text = PAGE.format(follow_up_lines=follow_up_lines, after_fixes_line=after_fixes_line,
                       after_fixes=after_fixes_section(record), pilot=pilot_section(record),
                       ws_arith=ws_arith_section(record), pilot_seed=PILOT_SEED, pilot_reading=PILOT_READING,
                       pilot_agree=wp.get("agree_decided", "-"), pilot_decided=wp.get("decided", "-"),
                       pilot_share=(wp.get("share_of_decided") or 0) * 100,
                       pilot_share_all=(wp.get("share_of_all") or 0) * 100,
                       rg_criterion=RG_CRITERION, rg_commit=RG_RULES_COMMIT, table="\n".join(rows), misses=misses,
                       bound=bound or "| (no settings) | | | |", bound_reading=bound_reading, figure=pic, command=record["command"],
                       commit=record["commit"], a=a, decided=a.get("decided"), agree=a.get("agree_decided"),
                       share=(a.get("share_of_decided") or 0) * 100, share_all=(a.get("share_of_all") or 0) * 100,
                       n=a.get("settings_with_runs"), cant=a.get("cant_tell"),
                       never="met" if a.get("never_not_indicated_where_all_seeds_gain_10pts") else "NOT met",
                       oos_agree=(a.get("out_of_sample") or {}).get("agree_decided"),
                       oos_decided=(a.get("out_of_sample") or {}).get("decided"),
                       oos_share=((a.get("out_of_sample") or {}).get("share_of_decided") or 0) * 100)
    tmp = md.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, md)


PAGE = """# Calibration: `grpolab preflight` against real GRPO runs (issue 43)

For each setting: the preflight on the starting model (`grpolab preflight`, the run's config, up to
128 held-out items x 8 samples, stopped once the GRPO verdict was decided after at least 32 items;
or, for settings whose runs already exist in docs/results/, the verdict computed from the headroom
numbers recorded before those runs), then the standard short GRPO run of that model per seed, and the
gain in held-out greedy accuracy of each run's final model over the starting model on the same
held-out items (all of them up to 256; 219 for sums 0..20, 200 seeds per MiniWoB++ task). What is
here is exactly what finished; settings without a gain were not run. Raw record:
[preflight_calibration.json](preflight_calibration.json).

Standard short runs: SmolLM2-135M-Instruct as `examples/smollm2_sums.yaml` (GRPO + LoRA r 16, lr 5e-4,
4 prompts x 8 at T 0.7, 10 steps, chat template, `final_line` verifier); the tiny model as the
headroom study (`studies/headroom.yaml`: 40 steps of 16 prompts x 8 at T 1, lr 1e-4) from a default
warm start (`grpolab sft --set task.name=TASK`), or, for `tiny/ws_arith/*`, from the headroom study's own
warm start ([below](#the-headroom-studys-settings-re-run-here)); MiniWoB++ as `studies/miniwob_gain.yaml` (120 steps).

## reasoning-gym families (chosen before any result)

{rg_criterion}

Recipe: `examples/smollm2_reasoning_gym.yaml` (the SmolLM2 recipe above with a 32-token cap and the task's
own prompt, which asks for the answer after `#`; 2000 generated entries, half of the questions held out;
the gain is measured on the first 256 held-out entries, which can repeat a question). The preflight's
rules were frozen before these runs (`src/grpolab/diagnostics/preflight.py` at commit {rg_commit}).

What came out (02:20 UTC): all three "indicated" (reachable 25-36% on 47 items, greedy 0, almost all of it
"the answer is in a failed response"); products gained +45.3 points on seed 0 and nothing on seeds 1
and 2 (mean +15.1: it counts as agreeing, but it is no setup that gains on 3 seeds), letter_counting and
leg_counting gained nothing on seed 0 (greedy 0.000 before and after on 256 items). Seeds 1-2, run later
(2026-12-05): letter_counting +37.5 and +0.0 (mean +12.5: like products, a gain on one seed in three,
so the frozen rule's "indicated" now counts as agreeing), leg_counting +0.0 and +0.0 (a miss). A flaw this shows, proposed and **not applied**: "the right answer already
appears in a failed response" matches any occurrence of a 1-2-digit number, which in a restated question
or a running count is often chance (letter counts are 0-5, leg counts small products); the rule should
count it only where the answer is the response's last number or has >= 3 digits. The agreement with that
change was not computed (it needs the stored responses re-read; not done before the deadline).
Before these 3 settings and the added seeds, the agreement was 15 of 20 decided (75%).

## Agreement

{after_fixes_line}- Settings with a preflight and a measured gain: **{n}**; GRPO decided ("indicated" / "not indicated")
  on {decided}, "can't tell" on {cant}.
- Go/no-go agrees with the sign of the mean gain (a gain within +-2 points counts as none) on
  **{agree} of {decided} decided settings ({share:.0f}%)**; counting "can't tell" as disagreement,
  {share_all:.0f}% of all settings. Target: >= 80%.
- Without `smollm2/digits2+1` (its rule was revised after its gain was seen, below): {oos_agree} of
  {oos_decided} decided ({oos_share:.0f}%).
- Never "not indicated" where every seed gained >= 10 points: **{never}**.
- With a pilot's verdict where one ran ([below](#a-pilot-a-few-steps-of-the-real-recipe)): {pilot_agree}
  of {pilot_decided} decided ({pilot_share:.0f}%), {pilot_share_all:.0f}% of all settings.{follow_up_lines}
- No predicted gain range is given: the reachable share is not a bound (SmolLM2 gained more than its
  reachable share on sums, learning to add as well as to stop); the figure shows both.

{figure}

Left: the starting model's reachable share and verdict against the measured gain (the MiniWoB++ rows as first
recorded). Right: the pilot's change in sampled success and verdict -- with the re-measurement, the last pilot
stage that ran and the re-measured MiniWoB++ gains, i.e. what the headline counts.

## Settings

{table}

## Misses

{misses}

## Could a threshold on one of the preflight's numbers do better?

The misses are "indicated" settings that did not gain. For each number the preflight reports, the
best agreement any one-threshold go/no-go rule on it reaches, with the threshold **chosen on these
same settings** (an in-sample upper bound, not a proposed rule; `threshold_bound` in the script,
same sign rule as above):

| statistic | settings with it | best agreement | the rule that reaches it |
|---|---|---|---|
{bound}

{bound_reading} The MiniWoB++ tasks that gained (click-tab,
focus-text-2, click-dialog-2) and those that lost (click-link, click-button, click-option) have the
same greedy (0.4-0.5), pass@k (0.8-1.0) and reachable share (0.4-0.5); tiny pairsum and arith have
more headroom than tiny reverse, which gained. What separates them happens during training (the
learning rate, the tiny model's capacity), which a measurement of the starting model does not see.
The stricter "answer already written" rule proposed above would not change this: letter_counting
keeps "indicated" from its solved samples (6.4% of items), and the rule would act only where no sample
solves an item (leg_counting: it could become a hit; products, which gained on one seed: it could
become a miss). It stays unapplied: it was conceived after these misses were seen.

## A pilot: a few steps of the real recipe

What the starting model's numbers cannot see -- whether this recipe (its learning rate, batch and the
model's capacity) converts the headroom -- a pilot measures: `grpolab preflight --pilot STEPS` trains
STEPS GRPO steps of the run's config (its own seed), measures the pilot's model on the same held-out
items with the same k and sampling seed, and lets the paired change in sampled success decide GRPO:
"indicated" where its 95% interval (bootstrap over items) lies above 0, "not indicated" where it lies
below +2 points, else "can't tell"; "not indicated" before the pilot stays so (no pilot is run). The
rule was fixed before any calibration pilot ran. Here: a quarter of the standard run's steps (3 of 10
for SmolLM2, 10 of 40 for the tiny model), seed {pilot_seed} (no calibration run uses it), all 256 held-out items
for the tiny model and 64 for SmolLM2 (its preflight costs minutes: the pilot's own numbers on SmolLM2
rest on 64 items x 8 samples and are a prediction, not a result; the gains they are checked against are
measured on 200 or more held-out items, or all the task holds; peak RSS is the pilot process's, the
preflight's measurement included; MiniWoB++'s two browsers, about 0.4 GiB each, come on top), from the
same starting model as the
runs. A pilot of a quarter of a short run is a weaker kind of prediction than a measurement of the
starting model -- it is the run's first steps on another seed -- and is reported apart. The MiniWoB++
settings share one pilot of the multi-task recipe, each task read from its per-family row. A pilot that
says "can't tell" now also says about how many items would decide at its change and spread
(`items_to_decide` in `src/grpolab/diagnostics/preflight/pilot.py`; a planning figure: the mean moves as items
are added).

{pilot}

{pilot_reading}

{after_fixes}{ws_arith}

## Rules changed while calibrating (disclosed)

- 22:45 UTC, after the preflight of `smollm2/digits2+1` and before its run's gain was known, GRPO
  "indicated" was made to need >= 5% of items able to give a group with mixed rewards (the preflight
  had found the answer written in 25% of the items' failed responses, but only 1 of 47 items with any
  successful sample), which turned that verdict into "can't tell".
- 22:55 UTC, after its run gained **+27.3 points**, the change was reverted: the final rule is the
  original one (some item with signal; a note flags sparse signal). So `smollm2/digits2+1` is not an
  out-of-sample test of the rule: its verdict was revised after its gain was seen, in both directions.
  The agreement is also given without it.
- Every setting's verdict here is recomputed from its stored statistics with the final rules
  (`preflight_record` in the script).

## How it was run

```bash
{command}
```

The pilots (2026-12-05) came from the same script: `--pilot 0.25` runs `grpolab preflight --pilot` per
setting where `ROOT/SETTING/pilot/` holds none (two processes at a time over disjoint `--only` lists,
each with `--no-runs --seeds 0`), and the MiniWoB++ one from `runs/ws_ch50`, rebuilt first with
`grpolab sft examples/miniwob_choice.yaml --out runs/ws_ch50 --set sft.max_steps=50` (Chromium and
`grpolab[miniwob]` needed); letter_counting's and leg_counting's seeds 1-2 with `--seeds 1 2 --only
smollm2/rg/letter_counting` (and `leg_counting`); the second MiniWoB++ pilot with `grpolab preflight
runs/ws_ch50 --config studies/miniwob_gain.yaml --set trainer.seed=7 --n 800 --no-readability --pilot 30
--out runs/calib/miniwob_pilot800` (15 minutes). About 65 minutes of the 2-core machine in all.

commit `{commit}` (the preflight code; the recorded settings' runs are older, see their pages). Machine:
the shared 2-core development VM (load average 9-15 while this ran), one torch thread.
"""


def plan(settings: list[dict], seeds: list[int]) -> list[tuple[int, dict]]:
    """The order of the runs: every setting's first seed up to the last tiny-model setting, then the
    tiny settings' other seeds (minutes each), then the remaining settings' first seed, then the rest."""
    first = [(seeds[0], s) for s in settings]
    last_tiny = max((i for i, s in enumerate(settings) if "tiny" in s), default=-1)
    head, tail = first[:last_tiny + 1], first[last_tiny + 1:]
    tiny_more = [(sd, s) for sd in seeds[1:] for s in settings if "tiny" in s]
    rest = [(sd, s) for sd in seeds[1:] for s in settings if "tiny" not in s]
    return head + tiny_more + tail + rest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="runs/calib")
    ap.add_argument("--json", default=str(bench.results_path("preflight_calibration.json")),
                    help="the record (the committed one: docs/results/preflight_calibration.json)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--only", nargs="*", default=None, help="setting names (default: all)")
    ap.add_argument("--gain-items", type=int, default=256)
    ap.add_argument("--preflight-items", type=int, default=128)
    ap.add_argument("--null", type=float, default=0.02, help="|mean gain| at most this counts as no gain")
    ap.add_argument("--stop-at", default=None, help="HH:MM (UTC): start nothing new after this time")
    ap.add_argument("--no-runs", action="store_true", help="preflights and summary only")
    ap.add_argument("--no-preflight", action="store_true", help="runs and gains only (preflights in a later pass)")
    ap.add_argument("--recorded", action="store_true", help="also the settings whose runs exist in docs/results/")
    ap.add_argument("--pilot", type=float, default=0.0, metavar="FRACTION",
                    help="also run `grpolab preflight --pilot` per setting, the pilot FRACTION of the setting's "
                         "steps (e.g. 0.25), and report the agreement with the pilot's verdict")
    ap.add_argument("--follow-up", action="store_true",
                    help="with --pilot: where the latest pilot says can't tell, one pilot of half the run's steps "
                         "(FOLLOW_UP; the MiniWoB++ one is read from ROOT/miniwob_pilot1600_60)")
    ap.add_argument("--miniwob-start", default=None, help="with --pilot: the MiniWoB++ 50-step warm start to "
                    "pilot from (runs/ws_ch50) where ROOT/miniwob_pilot holds no pilot yet")
    ap.add_argument("--summary-only", action="store_true",
                    help="recompute the agreements of --json from its own settings and write them back (no run, no page)")
    ap.add_argument("--page", default=None, help="write the results page (markdown) here, with --png")
    ap.add_argument("--png", default=None,
                    help="the figure (default: figures/preflight_calibration.png beside --page)")
    args = ap.parse_args()
    if args.png is None:
        args.png = str(Path(args.page).parent / "figures" / "preflight_calibration.png") if args.page \
            else str(bench.results_path("preflight_calibration.png"))
    root = (ROOT / args.root).resolve()
    out_json = ROOT / args.json
    record = json.loads(out_json.read_text()) if out_json.exists() else {}
    if args.summary_only:
        summarise(record, args.null)
        write_json(out_json, record)
        return
    record.setdefault("settings", [])
    record["command"] = "OMP_NUM_THREADS=1 python " + " ".join(sys.argv)
    record["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                      cwd=ROOT).stdout.strip()
    if args.recorded:
        rec_names = {r["name"] for r in recorded_settings()}
        record["settings"] = [x for x in record["settings"] if x["name"] not in rec_names and
                              not x["name"].startswith("tiny/recorded/")] + recorded_settings()
    by_name = {s["name"]: s for s in record["settings"]}
    if args.pilot:
        mw = miniwob_pilot(root, args.miniwob_start) or {}
        for task, rec in mw.items():
            if f"miniwob/recorded/{task}" in by_name:
                by_name[f"miniwob/recorded/{task}"]["pilot"] = rec
        # a second MiniWoB++ pilot, measured on 100 items per task after the first left 6 of 8 tasks "can't
        # tell" (as that verdict advises): reported beside the first, which stays the pre-stated one
        for key, dirname, _, _ in MINIWOB_MORE_PILOTS:
            for task, rec in (miniwob_pilot(root, None, dirname) or {}).items():
                if f"miniwob/recorded/{task}" in by_name:
                    by_name[f"miniwob/recorded/{task}"][key] = rec
        if args.follow_up:  # only the tasks the 200-per-task pilot left "can't tell" (FOLLOW_UP)
            for task, rec in (miniwob_pilot(root, None, FOLLOW_UP["miniwob_dir"]) or {}).items():
                x = by_name.get(f"miniwob/recorded/{task}")
                if x and needs_follow_up(x):
                    x["pilot_follow_up"] = {**rec, "steps": FOLLOW_UP["miniwob_steps"]}
            for task, rec in (miniwob_pilot(root, None, FOLLOW_UP_ITEMS["miniwob_dir"]) or {}).items():
                x = by_name.get(f"miniwob/recorded/{task}")
                if x and x.get("pilot_follow_up", {}).get("verdict") == "can't tell":
                    x["pilot_follow_up_items"] = {**rec, "steps": FOLLOW_UP["miniwob_steps"]}
        for task, rec in miniwob_after_fixes(root).items():
            if f"miniwob/recorded/{task}" in by_name:
                by_name[f"miniwob/recorded/{task}"]["after_fixes"] = rec
    settings = [s for s in SETTINGS if args.only is None or s["name"] in args.only]
    for s in SETTINGS:  # verdicts from the stored statistics with today's rules
        f = root / s["name"].replace("/", "_") / "preflight" / "preflight.json"
        if f.exists() and s["name"] in by_name:
            by_name[s["name"]]["preflight"] = preflight_record(json.loads(f.read_text()))

    def late() -> bool:
        if not args.stop_at:
            return False
        hh, mm = map(int, args.stop_at.split(":"))
        now = time.gmtime()
        return (now.tm_hour, now.tm_min) >= (hh, mm)

    def save() -> None:
        summarise(record, args.null)
        write_json(out_json, record)
        if args.page:
            figure(record, ROOT / args.png)
            page(record, ROOT / args.page, ROOT / args.png)

    for seed, s in plan(settings, args.seeds):
        if True:
            if late():
                print("stop time reached; nothing new started", flush=True)
                save()
                return
            rec = by_name.get(s["name"])
            if rec is None:
                rec = {"name": s["name"], "model": s["model"], "task": s["task"], "source": "run here",
                       "gain": {"seeds": {}}}
                record["settings"].append(rec)
                by_name[s["name"]] = rec
            cfg, sets = _config(s, root)
            rec["config"] = cfg
            rec["set"] = sets
            d = root / s["name"].replace("/", "_")
            try:
                base = (s["start"] if "start" in s else str(warm_start(s["tiny"], root, s.get("config"), s.get("warm", ())))) if "tiny" in s else SMOL
                if rec.get("preflight") is None and not args.no_preflight:
                    pf = preflight(s, base, cfg, sets, d / "preflight", d / "preflight.log", args.preflight_items)
                    if pf is not None:
                        rec["preflight"] = pf
                        save()
                if args.pilot and (rec.get("pilot") is None or (d / "pilot" / "preflight.json").exists()):
                    kind = "tiny" if "tiny" in s else "smollm2"  # (re-read from its files where they are here)
                    steps, run_steps = pilot_steps(sets, cfg, args.pilot)
                    if not (d / "pilot" / "preflight.json").exists():
                        print(f"{s['name']} pilot ({steps} steps)", flush=True)
                    rec["pilot"] = pilot(base, cfg, sets, d / "pilot", d / "pilot.log", steps=steps,
                                         items=PILOT_ITEMS[kind])
                    rec["pilot"]["run_steps"] = run_steps
                    save()
                if args.follow_up and needs_follow_up(rec) and rec["pilot"].get("run_steps"):
                    kind = "tiny" if "tiny" in s else "smollm2"
                    steps = follow_up_steps(rec["pilot"]["run_steps"])
                    if not (d / "pilot_follow_up" / "preflight.json").exists():
                        print(f"{s['name']} follow-up pilot ({steps} steps)", flush=True)
                    rec["pilot_follow_up"] = pilot(base, cfg, sets, d / "pilot_follow_up", d / "pilot_follow_up.log",
                                                   steps=steps, items=PILOT_ITEMS[kind])
                    save()
                if "recorded" in s:  # the runs exist: docs/results/real_model.json (3 seeds, 219 items)
                    rm = json.loads((ROOT / s["recorded"]).read_text())["variants"]["grpo"]
                    rec["source"] = f"preflight run here; gains from {s['recorded']}"
                    rec["gain"]["seeds"] = {str(sd): {"start": a, "final": b, "gain": g, "items": 219}
                                            for sd, a, b, g in zip(rm["seeds"], rm["start"], rm["final"], rm["gain"])}
                    save()
                    continue
                if args.no_runs or str(seed) in rec["gain"]["seeds"]:
                    continue
                print(f"{s['name']} seed {seed}", flush=True)
                b = greedy_items(base, cfg, sets, args.gain_items, d / "base_greedy.jsonl", d / "eval.log")
                run_dir = d / f"s{seed}"
                if not (run_dir / "final" / "config.json").exists():
                    _run([sys.executable, "-m", "grpolab.cli", "train", *_cfg_args(cfg, sets), "--set",
                          f"trainer.seed={seed}", "--set", f"trainer.run_dir={run_dir}", "--set",
                          "trainer.preflight=false", "--overwrite"], d / f"train_s{seed}.log")
                f = greedy_items(str(run_dir / "final"), cfg, sets, args.gain_items, d / f"final_s{seed}.jsonl",
                                 d / "eval.log")
                rec["gain"]["seeds"][str(seed)] = paired_gain(b, f)
                save()
                print(f"  gain {rec['gain']['seeds'][str(seed)]['gain']:+.3f}", flush=True)
            except RuntimeError as e:
                rec.setdefault("errors", []).append(str(e))
                print(f"  failed: {e}", flush=True)
                save()
    save()


if __name__ == "__main__":
    main()
