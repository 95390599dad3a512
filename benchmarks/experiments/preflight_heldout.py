"""The held-out calibration of `grpolab preflight` (issue 59 items 1-3): protocol, runner, report.

DRAFT until a commit titled "freeze" (studies/preflight_heldout/README.md): the settings generator,
the seeds, the run recipes, the label rule, the verdict rules compared and the headline are all in
this file, so one commit fixes them before the first result (docs/design.md habit 20). The runner
refuses to train or measure anything until that commit exists and this file is unchanged since.

    python benchmarks/experiments/preflight_heldout.py --dry-run                  # the plan, estimated cost
    OMP_NUM_THREADS=1 python benchmarks/experiments/preflight_heldout.py --root runs/heldout   # resumable
    python benchmarks/experiments/preflight_heldout.py --root runs/heldout --report \\
        --json docs/results/preflight_heldout.json --md docs/results/preflight_heldout.md

The runner calls the CLI only (`grpolab sft`, `grpolab preflight ... --pilot N --out DIR`, `grpolab
train`, `grpolab eval --completions`) and reads `preflight.json` through :func:`read_preflight`, the one
place to update when the preflight's output changes. One JSON record per (setting, stage, seed) is
written atomically under ROOT/records/ and skipped when present, so the study spans sessions.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grpolab.diagnostics.inference import Verdict, mcnemar_items, paired_seed_test, t_ppf
from grpolab.diagnostics.stats import wilson_interval
from grpolab.utils.io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
SMOL = "models/smollm2-135m-instruct"

# ---- the protocol's constants (frozen with this file) ------------------------------------------------
GENERATOR_SEED = 60  #: the settings generator's seed (protocol v2; v1 drew with 59, see the README)
TRAIN_SEEDS = (1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007)  #: training seeds of every setting (label)
PILOT_SEEDS = (2000, 2001)  #: the pilot's training seed: the first decides, the second is the retest
MEASURE_SEED = 3000  #: `grpolab preflight --seed` (the sampling of its measurements), every stage
ALPHA = 0.05  #: the label test's level
MARGIN = 0.03  #: "no gain": the one-sided (1 - ALPHA) upper bound of the mean gain is below this (3 points)
LABEL_ITEMS = 256  #: held-out items of the label (all of them where the task holds fewer)
MINIWOB_LABEL_ITEMS = 200  #: per MiniWoB++ task (one task per run)
PILOT_FRACTION = 0.25  #: `--pilot` steps as a share of the run's steps
COST_SHARE = 0.25  #: the pilot verdict's budget: this share of the CPU seconds of the setting's first training seed
PASSK_MARGIN = 0.05  #: pass@k-only rule: go where pass@k - greedy >= this
DEGENERATE_AFTER = 0.30  #: a seed's final model answers >= this share of items with its most common answer
DEGENERATE_RISE = 0.20  #: ... and that share rose by >= this over the starting model's
HIGH_LR_SHARE = 1 / 3  #: share of each stratum crossed with a learning rate 10x the recipe's
PREFLIGHT_ITEMS = {"smollm2": 64, "tiny": 256, "miniwob": 40}  #: `--n` of the verdict stages
#: the verdict stages: the start alone (no budget), the pilot within COST_SHARE of a run (the headline; on
#: both pilot seeds) and the same pilot with no budget (exploratory, seed PILOT_SEEDS[0])
VERDICT_STAGES = ("start_verdict", "pilot", "pilot_full")


@dataclass(frozen=True)
class Recipe:
    """One seed's GRPO run: steps x prompts_per_step x group_size responses of at most max_new_tokens."""

    steps: int
    prompts_per_step: int
    group_size: int
    lr: float
    max_new_tokens: int

    def sets(self) -> list[str]:
        return [f"trainer.steps={self.steps}", f"rollout.prompts_per_step={self.prompts_per_step}",
                f"rollout.group_size={self.group_size}", f"optim.lr={self.lr:g}",
                f"rollout.max_new_tokens={self.max_new_tokens}", f"trainer.eval_every={self.steps}"]


@dataclass(frozen=True)
class Setting:
    """A model, a task setup and a recipe. ``key()`` identifies the task setup (for the in-sample check)."""

    name: str
    stratum: str
    model: str  #: "smollm2" | "tiny" | "miniwob"
    task: str
    options: str  #: the task options that define it, as canonical JSON (sorted keys)
    template: str | None  #: task.prompt_template (None: the config's own)
    config: str | None  #: the base config file (None: the tiny model's defaults)
    recipe: Recipe
    warm: tuple = ()  #: `grpolab sft` arguments of the warm start (tiny / miniwob); () = none
    extra: tuple = ()  #: further --set lines (chat template off, ...)
    high_lr: bool = False

    def key(self) -> tuple:
        return (self.model, self.task, self.options, self.recipe.max_new_tokens, self.template, self.extra)

    def slug(self) -> str:
        return self.name.replace("/", "__")

    def label_items(self) -> int:
        return MINIWOB_LABEL_ITEMS if self.model == "miniwob" else LABEL_ITEMS

    def pilot_steps(self) -> int:
        return max(1, round(self.recipe.steps * PILOT_FRACTION))

    def overrides(self, root: Path) -> list[str]:
        """The run's `--set` lines (model path, task options, recipe), shared by every stage."""
        model = SMOL if self.model == "smollm2" else str(root / "warm" / self.warm_key())
        opts = [f"task.options.{k}={json.dumps(v)}" for k, v in json.loads(self.options).items()]  # JSON is YAML
        template = [] if self.template is None else [f"task.prompt_template={self.template}"]
        return [f"model.path={model}", f"task.name={self.task}", *opts, *template, *self.extra, *self.recipe.sets(),
                "log.tensorboard=false", "log.progress=false", "log.plots=false", "log.completions_every=0"]

    def warm_key(self) -> str:
        """The warm start's folder name: settings with the same `grpolab sft` arguments share one."""
        return "ws_" + hashlib.sha1(json.dumps(self.warm).encode()).hexdigest()[:12]


def _canon(options: dict) -> str:
    return json.dumps(options, sort_keys=True)


# ---- the recipes -------------------------------------------------------------------------------------
SMOL_RECIPE = Recipe(steps=10, prompts_per_step=4, group_size=8, lr=5e-4, max_new_tokens=12)  # smollm2_sums.yaml
TINY_RECIPE = Recipe(steps=40, prompts_per_step=16, group_size=8, lr=1e-4, max_new_tokens=48)  # headroom.yaml
MINIWOB_RECIPE = Recipe(steps=60, prompts_per_step=8, group_size=8, lr=1e-4, max_new_tokens=32)  # miniwob_gain.yaml
SUMS = "examples/smollm2_sums.yaml"
TINY_FIXED = ("sft.enabled=no", "rollout.temperature=1.0")
MINIWOB_WARM = ("examples/miniwob.yaml",)
PRINTABLE = ("--set", "model.tokenizer_alphabet=printable")  # its own 500 warm-start steps on ten tasks


def _smol(name, options, template="{prompt}", cap=12, extra=(), config=SUMS, task="short_arith"):
    return Setting(name=f"smollm2/{name}", stratum="smollm2-arith" if task == "short_arith" else "smollm2-" + task,
                   model="smollm2", task=task, options=_canon(options), template=template,
                   config=config, recipe=Recipe(**{**asdict(SMOL_RECIPE), "max_new_tokens": cap}), extra=tuple(extra))


def _tiny(name, task, options, config=None, recipe=TINY_RECIPE, warm_extra=()):
    warm = (*([config] if config else []), "--set", f"task.name={task}", *[x for k, v in sorted(options.items())
                                           for x in ("--set", f"task.options.{k}={json.dumps(v)}")], *warm_extra)
    return Setting(name=f"tiny/{name}", stratum="tiny", model="tiny", task=task, options=_canon(options),
                   template=None, config=config, recipe=recipe, warm=warm, extra=TINY_FIXED)


def _miniwob(task):
    return Setting(name=f"miniwob/single/{task}", stratum="miniwob", model="miniwob", task="miniwob",
                   options=_canon({"tasks": [task]}), template=None, config="studies/miniwob_gain.yaml",
                   recipe=MINIWOB_RECIPE, warm=(MINIWOB_WARM[0], "--set", "sft.max_steps=500"))


def candidate_pools() -> dict[str, list[Setting]]:
    """Every setting the generator may draw, per stratum (none of them measured before by this project)."""
    ef = {"eval_fraction": 0.2}
    arith = [
        _smol("mixed0-20", {"max_operand": 20, "ops": "+-", "eval_fraction": 0.5}),
        _smol("diff0-50", {"max_operand": 50, "ops": "-", **ef}),
        _smol("digits2+2", {"digits": [2, 2], "max_operand": None, "ops": "+", **ef}),
        _smol("diffdigits2-1", {"digits": [2, 1], "max_operand": None, "ops": "-", **ef}),
        _smol("sums0-30", {"max_operand": 30, "ops": "+", "eval_fraction": 0.5}),
        _smol("sums0-20/cap16", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5}, cap=16),
        _smol("sums0-20/cap24", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5}, cap=24),
        _smol("sums0-20/answer-line", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5},
              template="{prompt} End with a line 'Answer: N'.", cap=32),
        _smol("diff0-20/number-only", {"max_operand": 20, "ops": "-", "eval_fraction": 0.5},
              template="{prompt} Answer with the number only."),
        _smol("sums0-100/cap16", {"max_operand": 100, "ops": "+", **ef}, cap=16),
        _smol("mixeddigits2+1", {"digits": [2, 1], "max_operand": None, "ops": "+-", **ef}),
        _smol("sums0-20/no-chat", {"max_operand": 20, "ops": "+", "eval_fraction": 0.5},
              extra=("task.chat_template=off",)),
        _smol("diff0-20/cap32", {"max_operand": 20, "ops": "-", "eval_fraction": 0.5}, cap=32),
    ]
    rg = "examples/smollm2_reasoning_gym.yaml"
    gym = [  # RG_CRITERION of preflight_calibration.py, at configurations not run before
        _smol("rg/products2x2", {"name": "products", "size": 2000, "eval_fraction": 0.5, "config": {
            "min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}}, cap=32, config=rg, task="reasoning_gym"),
        _smol("rg/letter_counting_long", {"name": "letter_counting", "size": 2000, "eval_fraction": 0.5, "config": {
            "min_words": 15, "max_words": 25}}, cap=32, config=rg, task="reasoning_gym"),
        # basic_arithmetic's "/" was dropped before the freeze: its items do not match their answers
        # ("Calculate 1 / 5." -> 5 in the installed reasoning-gym), so its multiplication stands in, of two
        # 2-digit numbers (1-2 digits gave 192 distinct of the first 256 held-out questions: criterion (c))
        _smol("rg/basic_mult2x2", {"name": "basic_arithmetic", "size": 2000, "eval_fraction": 0.5, "config": {
            "min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2, "operators": ["*"],
            "allow_parentheses": False, "allow_negation": False}}, cap=32, config=rg, task="reasoning_gym"),
    ]
    tool_warm = ("--set", "model.hidden_size=128", "--set", "model.num_layers=2", "--set", "model.intermediate_size=256",
                 "--set", "sft.batch_size=32", "--set", "sft.eval_every=40", "--set", "sft.n_eval=32", "--set",
                 "sft.max_steps=600", "--set", "sft.lr=3e-3", "--set", "sft.select_on=heldout")  # tiny/tool_arith's
    tiny = [
        # the tiny tokenizer has no capitals ("What is ..."): a printable alphabet, set at the warm start
        _tiny("short_arith/sums0-20", "short_arith", {"max_operand": 20, "eval_fraction": 0.5}, warm_extra=PRINTABLE),
        _tiny("short_arith/digits2+1", "short_arith", {"digits": [2, 1]}, warm_extra=PRINTABLE),
        _tiny("arith2", "arith", {"max_digits": 2}),
        _tiny("reverse6-9", "reverse", {"min_len": 6, "max_len": 9}),
        _tiny("arith2terms3", "arith", {"min_terms": 2, "max_terms": 2, "max_digits": 3}),
        _tiny("arith4-5terms", "arith", {"min_terms": 4, "max_terms": 5}),
        _tiny("tool_arith/2terms+-", "tool_arith", {"max_terms": 2, "ops": "+-"}, config="examples/tool_arith.yaml",
              recipe=Recipe(steps=20, prompts_per_step=8, group_size=8, lr=3e-4, max_new_tokens=48),
              warm_extra=tool_warm),
    ]
    web = [_miniwob(t) for t in ("click-test-2", "click-dialog", "focus-text", "enter-text", "enter-password",
                                 "login-user")]
    verifiers = [_smol(f"{fam}/level{lv}", {"levels": [lv]}, cap=128, config=f"examples/smollm2_{fam}.yaml",
                       task=f"short_{fam}") for fam in ("code", "sql", "json") for lv in (1, 2, 3)]
    return {"smollm2-arith": arith, "reasoning-gym": gym, "tiny": tiny, "miniwob": web, "verifiers": verifiers}


#: how many settings each stratum contributes (26 in all)
DRAWS = {"smollm2-arith": 9, "reasoning-gym": 3, "tiny": 5, "miniwob": 5, "verifiers": 4}


def _with_high_lr(s: Setting) -> Setting:
    r = Recipe(**{**asdict(s.recipe), "lr": s.recipe.lr * 10})
    return Setting(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "name": s.name + "/lr-high",
                      "recipe": r, "high_lr": True})


def draw_settings(seed: int = GENERATOR_SEED) -> list[Setting]:
    """The held-out settings: ``DRAWS[stratum]`` drawn without replacement from each pool with
    ``random.Random(seed)`` (pools in the order :func:`candidate_pools` lists them), then, within each
    stratum, ``ceil(HIGH_LR_SHARE * n)`` of the drawn settings (again drawn) get a learning rate 10x the
    recipe's -- likely too high, so that a share of settings should not gain."""
    rng = random.Random(seed)
    out: list[Setting] = []
    for stratum, pool in candidate_pools().items():
        n = DRAWS[stratum]
        if n > len(pool):
            raise ValueError(f"stratum {stratum}: {n} draws from a pool of {len(pool)}")
        drawn = rng.sample(pool, n)
        high = set(rng.sample(range(n), math.ceil(HIGH_LR_SHARE * n)))
        out += [_with_high_lr(s) if i in high else s for i, s in enumerate(drawn)]
    return out


#: The 26 settings of docs/results/preflight_calibration.json (in-sample: never reused), by name and by
#: the task setup :meth:`Setting.key` compares (model, task, options, cap, template, extra lines).
_SUMS20 = {"max_operand": 20, "ops": "+", "eval_fraction": 0.5}


def _key(model, task, options, cap, template: str | None = "{prompt}", extra=()):
    return (model, task, _canon(options), cap, template, tuple(extra))


IN_SAMPLE: dict[str, tuple] = {
    "smollm2/sums0-20/cap12": _key("smollm2", "short_arith", _SUMS20, 12),
    "smollm2/sums0-20/cap32": _key("smollm2", "short_arith", _SUMS20, 32),
    "smollm2/sums0-20/cap6": _key("smollm2", "short_arith", _SUMS20, 6),
    "smollm2/sums0-50": _key("smollm2", "short_arith", {"max_operand": 50, "ops": "+", "eval_fraction": 0.2}, 12),
    "smollm2/sums0-10": _key("smollm2", "short_arith", {"max_operand": 10, "ops": "+", "eval_fraction": 0.5}, 12),
    "smollm2/digits2+1": _key("smollm2", "short_arith", {"digits": [2, 1], "max_operand": None, "ops": "+",
                                                         "eval_fraction": 0.2}, 12),
    "smollm2/diff0-20": _key("smollm2", "short_arith", {"max_operand": 20, "ops": "-", "eval_fraction": 0.5}, 12),
    "smollm2/sums0-20/number-only": _key("smollm2", "short_arith", _SUMS20, 12, "{prompt} Answer with the number only."),
    "smollm2/rg/products": _key("smollm2", "reasoning_gym", {"name": "products", "size": 2000, "eval_fraction": 0.5,
                                "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}}, 32),
    "smollm2/rg/letter_counting": _key("smollm2", "reasoning_gym", {"name": "letter_counting", "size": 2000,
                                       "eval_fraction": 0.5, "config": {}}, 32),
    "smollm2/rg/leg_counting": _key("smollm2", "reasoning_gym", {"name": "leg_counting", "size": 2000,
                                    "eval_fraction": 0.5, "config": {"min_animals": 1, "max_animals": 1}}, 32),
    "tiny/arith": _key("tiny", "arith", {}, 48, None, TINY_FIXED),
    "tiny/arith3": _key("tiny", "arith", {"max_digits": 3}, 48, None, TINY_FIXED),
    "tiny/ws_arith/arith": _key("tiny", "arith", {"max_digits": 1}, 48, None, TINY_FIXED),
    "tiny/ws_arith/arith3": _key("tiny", "arith", {"max_digits": 3, "ws": "ws_arith"}, 48, None, TINY_FIXED),
    "tiny/reverse": _key("tiny", "reverse", {}, 48, None, TINY_FIXED),
    "tiny/pairsum": _key("tiny", "pairsum", {}, 96, None, TINY_FIXED),
    "tiny/tool_arith": _key("tiny", "tool_arith", {}, 48, None, TINY_FIXED),
    **{f"miniwob/recorded/{t}": _key("miniwob", "miniwob", {"tasks": [t]}, 32, None) for t in (
        "click-tab", "click-link", "click-button", "click-option", "click-widget", "focus-text-2", "click-dialog-2",
        "click-test-transfer")},
}
#: settings an earlier version of this protocol ran (v1, frozen at 9385e0c, stopped after one record:
#: seed 1000 of this setting's run): never drawn again, under any learning rate
RUN_BEFORE = ("smollm2/digits3+1",)
#: the tasks (model, task name, task options) whose starting-model numbers this project has seen
SEEN_TASKS = {(k[0], k[1], k[2]) for k in IN_SAMPLE.values()}


def in_sample_clashes(settings: list[Setting]) -> list[str]:
    """Names of drawn settings that repeat an in-sample setting: its name, its whole task setup, or its
    task (model, task, options) under another cap or template is allowed; the same name or key is not."""
    keys = set(IN_SAMPLE.values())
    return [s.name for s in settings if s.name in IN_SAMPLE or s.key() in keys
            or s.name.removesuffix("/lr-high") in (*IN_SAMPLE, *RUN_BEFORE)]


# ---- the runner --------------------------------------------------------------------------------------
CLI = [sys.executable, "-m", "grpolab.cli"]
#: rough CPU seconds per generated token, one torch thread (an ESTIMATE for --dry-run, never used by a verdict
#: or a label). SmolLM2: a 10-step run of examples/smollm2_sums.yaml (cap 12, the in-sample setting) took
#: 111 CPU s (171 s wall on the loaded machine) before the freeze -> 111 / (10 x 32 x 12 x 1.5) = 0.019
SECONDS_PER_TOKEN = {"smollm2": 0.02, "tiny": 0.0005, "miniwob": 0.004}


@dataclass(frozen=True)
class Stage:
    """One unit of work: a stage of a setting on one seed, with its record's path."""

    setting: Setting
    stage: str  #: "train" | one of VERDICT_STAGES | "eval_start" | "eval_final"
    seed: int

    def record_path(self, root: Path) -> Path:
        return root / "records" / self.setting.slug() / f"{self.stage}-{self.seed}.json"

    def out_dir(self, root: Path) -> Path:
        return root / "runs" / self.setting.slug() / f"{self.stage}-{self.seed}"


def plan(settings: list[Setting]) -> list[Stage]:
    """Every stage, in the order run: each setting's first training seed (its wall time sets the pilot's
    budget) with the starting model's and that seed's evaluations and the evaluation of its first-quarter
    checkpoint; then the verdicts (start, two budgeted pilots, the unbudgeted pilot); then the other seeds,
    each evaluated right after it trains (a run's model is deleted once evaluated: 8 seeds x 26 settings
    of SmolLM2 would not fit on the disk). Seed-major, so a study stopped half-way holds every setting's
    verdicts and whole seeds of many settings rather than all of a few."""
    first, rest = TRAIN_SEEDS[0], TRAIN_SEEDS[1:]
    out = [st for s in settings for st in (Stage(s, "train", first), Stage(s, "eval_start", 0),
                                           Stage(s, "prefix_eval", first), Stage(s, "eval_final", first))]
    out += [Stage(s, "start_verdict", MEASURE_SEED) for s in settings]
    out += [Stage(s, "pilot", p) for p in PILOT_SEEDS for s in settings]
    out += [Stage(s, "pilot_full", PILOT_SEEDS[0]) for s in settings]
    out += [st for seed in rest for s in settings for st in (Stage(s, "train", seed), Stage(s, "eval_final", seed))]
    return out


def estimate_seconds(s: Setting) -> dict[str, float]:
    """ESTIMATED CPU seconds of one seed's run, of the label's evaluations and of one verdict stage (at
    most COST_SHARE of a run by its budget), from the recipe's sizes alone."""
    r, per = s.recipe, SECONDS_PER_TOKEN[s.model]
    run = r.steps * r.prompts_per_step * r.group_size * r.max_new_tokens * per * 1.5  # x1.5: the update
    evals = (1 + len(TRAIN_SEEDS)) * s.label_items() * r.max_new_tokens * per / 4  # greedy, batched
    verdict = COST_SHARE * run
    return {"run": run, "evals": evals, "verdict": verdict,
            "total": len(TRAIN_SEEDS) * run + evals + (1 + len(PILOT_SEEDS)) * verdict}


def _sets(s: Setting, root: Path) -> list[str]:
    out = []
    for x in s.overrides(root):
        out += ["--set", x]
    return out


def start_model(s: Setting, root: Path) -> str:
    return s.overrides(root)[0].split("=", 1)[1]


def command(st: Stage, root: Path, budget_s: float | None = None, n_items: int | None = None) -> list[str]:
    """The CLI command of a stage (budget_s: the verdict stages' --budget, seconds; n_items: the evaluations'
    --n, default the setting's label_items(); pass the task's held-out count where it holds fewer)."""
    s, out = st.setting, st.out_dir(root)
    cfg, sets = (["--config", s.config] if s.config else []), _sets(s, root)
    if st.stage == "train":
        # the first seed keeps a checkpoint every pilot_steps() steps: its first-quarter model is evaluated
        # (stage prefix_eval); saving does not touch the run's random state
        p, first = s.pilot_steps(), st.seed == TRAIN_SEEDS[0]
        save = [f"trainer.save_every={p}", f"trainer.keep_checkpoints={s.recipe.steps // p + 1}"] if first else [
            f"trainer.save_every={s.recipe.steps}"]
        return [*CLI, "train", *([s.config] if s.config else []), *sets, "--set", f"trainer.seed={st.seed}",
                "--set", f"trainer.run_dir={out}", "--set", "trainer.preflight=false", "--set", "task.n_eval=16",
                *[x for kv in save for x in ("--set", kv)], "--overwrite"]
    if st.stage in VERDICT_STAGES:
        pilot = 0 if st.stage == "start_verdict" else s.pilot_steps()
        seed = PILOT_SEEDS[0] if st.stage == "start_verdict" else st.seed
        return [*CLI, "preflight", start_model(s, root), *cfg, *sets, "--set", f"trainer.seed={seed}",
                "--n", str(PREFLIGHT_ITEMS[s.model]), "--seed", str(MEASURE_SEED), "--no-readability",
                "--pilot", str(pilot), "--budget", f"{budget_s or 0:.0f}", "--out", str(out)]
    if st.stage not in ("eval_start", "eval_final", "prefix_eval"):
        raise ValueError(f"unknown stage {st.stage!r}")
    run = root / "runs" / s.slug() / f"train-{st.seed}"
    model = {"eval_final": str(run / "final"), "eval_start": start_model(s, root),
             "prefix_eval": str(prefix_checkpoint(run, s))}[st.stage]
    n = min(n_items or s.label_items(), PREFLIGHT_ITEMS[s.model]) if st.stage == "prefix_eval" else (
        n_items or s.label_items())
    return [*CLI, "eval", model, *cfg, *sets, "--samples", "0", "--examples", "0", "--n", str(n),
            "--completions", str(out / "greedy.jsonl")]


def prefix_checkpoint(run: Path, s: Setting) -> Path:
    """The first seed's model after pilot_steps() steps (the run's own first quarter)."""
    return run / "checkpoints" / f"step_{s.pilot_steps():06d}" / "model"


def run_command(cmd: list[str], log: Path) -> tuple[int, float, float]:
    """``(rc, cpu_s, wall_s)``: the command's exit status, its CPU seconds (user + system, its waited-for
    children included) and wall seconds."""
    log.parent.mkdir(parents=True, exist_ok=True)
    # the frozen checkout's src/, whatever grpolab the interpreter would import otherwise (an editable
    # install of another checkout): the gate below checks this tree, so this tree's code must run
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "PYTHONPATH": str(ROOT / "src")}
    t0 = time.time()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime, time.time() - t0


# ---- adapters: the only code that knows the CLI's output files ---------------------------------------
def read_preflight(d: dict) -> dict:
    """The fields the protocol uses from one ``preflight.json`` (docs/when-grpo-helps.md describes it):
    GRPO's final verdict, its cause (e.g. ``pilot_no_update``), the start's greedy and pass@k, the stage
    reached and the pilot's updates. Update this function, not its callers, when that file changes."""
    grpo = next((m for m in d.get("methods", []) if m.get("id") == "grpo"), {})
    stats, pilot = d.get("stats", {}), d.get("pilot") or {}
    val = lambda k: (stats.get(k) or {}).get("value")  # noqa: E731
    return {"verdict": d["verdict"], "cause": grpo.get("cause"), "greedy": val("greedy"), "pass_at_k": val("pass_at_k"),
            "stage": (d.get("settings") or {}).get("stage"), "pilot_updates": (pilot.get("training") or {}).get("updates"),
            "seconds": (d.get("settings") or {}).get("total_seconds")}


def answer_of(completion: str) -> str:
    """The answer a response gives: its last non-empty line, stripped (for the degenerate-answer check)."""
    lines = [x.strip() for x in completion.strip().splitlines() if x.strip()]
    return lines[-1] if lines else ""


def read_completions(path: Path) -> dict:
    """``grpolab eval --completions`` rows -> per-item solved (reward >= 1) and answers, in item order."""
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return {"solved": [float(r["reward"]) >= 1 - 1e-9 for r in rows], "answers": [answer_of(r["completion"]) for r in rows],
            "prompts": [r["prompt"] for r in rows]}


def stage_data(st: Stage, root: Path) -> dict:
    out = st.out_dir(root)
    if st.stage in VERDICT_STAGES:
        return read_preflight(json.loads((out / "preflight.json").read_text()))
    if st.stage in ("eval_start", "eval_final", "prefix_eval"):
        return read_completions(out / "greedy.jsonl")
    return {"final": str(out / "final"), "reward_mean": read_train_rewards(out),
            "with_signal": read_train_rewards(out, "groups/with_signal")}


def read_train_rewards(run_dir: Path, key: str = "reward/mean") -> list[float]:
    """The run's ``key`` per step from its ``metrics.jsonl`` (docs/metrics.md), in step order."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = sorted((r for r in rows if key in r and "step" in r), key=lambda r: r["step"])
    return [float(r[key]) for r in rows]


# ---- the freeze gate -----------------------------------------------------------------------------------
PROTOCOL_FILES = ("benchmarks/experiments/preflight_heldout.py", "studies/preflight_heldout/README.md")


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def frozen_commit() -> str:
    """The commit titled "freeze" that last touched the protocol files, provided nothing of them (and nothing
    under src/, the preflight it freezes) changed since. Raises RuntimeError otherwise: no run before it."""
    head = _git("log", "-1", "--format=%H %s", "--", *PROTOCOL_FILES).split(" ", 1)
    if len(head) != 2 or head[1].strip().lower() != "freeze":
        raise RuntimeError("the protocol is a DRAFT: commit it in one commit titled 'freeze' before any run "
                           "(studies/preflight_heldout/README.md)")
    changed = _git("diff", "--name-only", head[0], "--", *PROTOCOL_FILES, "src")
    untracked = _git("ls-files", "--others", "--exclude-standard", "--", "src")
    if changed or untracked:
        raise RuntimeError(f"changed since the freeze {head[0][:10]}: {(changed + ' ' + untracked).split()}; a change "
                           "after the freeze is a new protocol on new settings (README)")
    return head[0]


def budget_for(s: Setting, root: Path) -> float | None:
    """The pilot's --budget (wall seconds): COST_SHARE x the CPU seconds of the setting's first training seed.
    CPU, not wall: a wall time depends on what else the machine ran then (protocol v1 took it from the
    wall time, so a seed trained under load would have granted a later pilot on a quiet machine several
    times a quarter of the run's work). With one torch thread a quiet machine's wall ~ CPU; under load the
    pilot gets less CPU than the budget's seconds, never more."""
    rec = Stage(s, "train", TRAIN_SEEDS[0]).record_path(root)
    return COST_SHARE * json.loads(rec.read_text())["cpu_s"] if rec.exists() else None


def execute(st: Stage, root: Path, commit: str) -> dict | None:
    """Run one stage unless its record exists; write the record atomically. None: skipped (not ready)."""
    path = st.record_path(root)
    if path.exists():
        return json.loads(path.read_text())
    budget = budget_for(st.setting, root) if st.stage == "pilot" else None
    if st.stage == "pilot" and budget is None:
        return None  # its first training seed has not run yet
    if st.setting.model == "smollm2" and not (ROOT / SMOL / "config.json").exists():
        raise RuntimeError(f"{SMOL} is missing: run `grpolab models import smollm2-135m-instruct --out {SMOL}` "
                           "in this checkout first (docs/real-models.md)")
    if st.setting.warm and not (root / "warm" / st.setting.warm_key() / "sft.json").exists():
        warm = [*CLI, "sft", *st.setting.warm, "--out", str(root / "warm" / st.setting.warm_key())]
        rc, cpu, wall = run_command(warm, root / "logs" / f"{st.setting.warm_key()}.log")
        if rc != 0:
            raise RuntimeError(f"warm start failed (rc {rc}): {' '.join(warm)}")
    n_items = None
    if st.stage in ("eval_start", "eval_final", "prefix_eval"):
        chk = check_setup(st.setting, root)
        if not chk["ok"]:
            raise RuntimeError(f"{st.setting.name}: {chk.get('error', chk)}")
        n_items = chk["label_items"]  # all held-out items where the task holds fewer than label_items()
    cmd = command(st, root, budget, n_items)
    rc, cpu, wall = run_command(cmd, root / "logs" / st.setting.slug() / f"{st.stage}-{st.seed}.log")
    rec = {"protocol_commit": commit, "setting": st.setting.name, "stage": st.stage, "seed": st.seed,
           "command": cmd, "rc": rc, "cpu_s": cpu, "wall_s": wall, "budget_s": budget,
           "data": stage_data(st, root) if rc == 0 else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    # a failed command is kept beside (retried by the next invocation), never as the stage's record
    atomic_write_json(path if rc == 0 else path.with_name(f"{path.stem}.failed-{int(time.time())}.json"), rec)
    if rc == 0 and st.stage in ("eval_final", "prefix_eval") and Stage(
            st.setting, "eval_final", st.seed).record_path(root).exists():
        release_run(st, root)
    return rec if rc == 0 else None


def release_run(st: Stage, root: Path) -> None:
    """Delete an evaluated run's models (final/, checkpoints/): its record holds the greedy completions, and
    8 seeds x 26 settings of SmolLM2 models (~1 GB a run) would not fit on the disk. The first seed's
    checkpoints stay until its first-quarter model is evaluated."""
    import shutil

    run = root / "runs" / st.setting.slug() / f"train-{st.seed}"
    shutil.rmtree(run / "final", ignore_errors=True)
    if st.seed != TRAIN_SEEDS[0] or Stage(st.setting, "prefix_eval", st.seed).record_path(root).exists():
        shutil.rmtree(run / "checkpoints", ignore_errors=True)


# ---- the label ---------------------------------------------------------------------------------------
GAIN, NO_GAIN, UNCLEAR = "gain", "no gain", "unclear"


def mode_share(answers: list[str]) -> tuple[str, float]:
    """The most common answer and the share of items answered with it."""
    if not answers:
        return "", 0.0
    ans, n = Counter(answers).most_common(1)[0]
    return ans, n / len(answers)


def seed_gain(start: dict, final: dict) -> dict:
    """One seed's held-out gain (final - start greedy accuracy on the same items) and its degenerate-answer
    check: the share of items answered with the run's most common answer, before and after; where it is
    >= DEGENERATE_AFTER and rose by >= DEGENERATE_RISE, the seed is flagged and its gain is also given with
    the items answered with that answer counted as unsolved."""
    if start["prompts"] != final["prompts"]:
        raise ValueError("start and final were evaluated on different items; evaluate both with the same --n")
    n = len(start["solved"])
    before, after = mode_share(start["answers"]), mode_share(final["answers"])
    flagged = after[1] >= DEGENERATE_AFTER and after[1] - before[1] >= DEGENERATE_RISE
    kept = [ok and not (flagged and a == after[0]) for ok, a in zip(final["solved"], final["answers"])]
    return {"items": n, "start": sum(start["solved"]) / n, "final": sum(final["solved"]) / n,
            "gain": (sum(final["solved"]) - sum(start["solved"])) / n,
            "gain_without_mode": (sum(kept) - sum(start["solved"])) / n,
            "mode_before": {"answer": before[0], "share": before[1]}, "mode_after": {"answer": after[0], "share": after[1]},
            "degenerate": flagged, "items_test": mcnemar_items(final["solved"], start["solved"]).to_dict()}


def upper_bound(c) -> float:
    """The one-sided (1 - ALPHA) upper t bound of a :class:`PairedComparison`'s mean gain."""
    return c.mean + t_ppf(1 - ALPHA, c.n - 1) * c.sd / math.sqrt(c.n)


def label_of(gains: list[float]) -> tuple[str, dict]:
    """gain / no gain / unclear from the seeds' held-out gains (:func:`paired_seed_test` of final vs start
    accuracy, paired by seed, alpha ALPHA): "gain" where the test is significant (t and exact sign-flip
    both reject) and the mean is > 0; "no gain" where it is significant and the mean is < 0, or where the
    one-sided (1 - ALPHA) upper t bound of the mean gain is below MARGIN (the run gains less than 3
    points, whatever else it does); else "unclear". With 8 seeds one seed that did not move still leaves
    a gain on the others detectable (sign-flip p 4/256); with 5 it never could (2/32 = 0.0625)."""
    if len(gains) < 5:
        raise ValueError(f"a label needs >= 5 seeds' gains, got {len(gains)}")
    c = paired_seed_test(gains, [0.0] * len(gains), alpha=ALPHA, margin=MARGIN)
    test = {**c.to_dict(), "upper_one_sided": upper_bound(c)}
    if c.verdict is Verdict.SIGNIFICANT:
        return (GAIN if c.mean > 0 else NO_GAIN), test
    return (NO_GAIN if upper_bound(c) < MARGIN else UNCLEAR), test


def setting_label(seeds: list[dict]) -> dict:
    """The setting's label, and the label from the gains without the flagged seeds' constant answers: a
    "gain" that is not a gain without them is labelled "degenerate gain" (counted as no gain)."""
    label, test = label_of([s["gain"] for s in seeds])
    robust, robust_test = label_of([s["gain_without_mode"] for s in seeds])
    final = "degenerate gain" if label == GAIN and robust != GAIN else label
    return {"label": final, "label_plain": label, "test": test, "label_without_mode": robust,
            "test_without_mode": robust_test, "degenerate_seeds": sum(s["degenerate"] for s in seeds)}


# ---- the verdict rules compared ------------------------------------------------------------------------
GO, NO_GO, CANT_TELL = "go", "no go", "can't tell"
_MAP = {"indicated": GO, "not indicated": NO_GO, "can't tell": CANT_TELL}


def rule_verdicts(start: dict, pilots: list[dict]) -> dict[str, str]:
    """Each rule's verdict for a setting from its verdict stages' ``data`` (read_preflight): the starting
    model's preflight; the pilot (first pilot seed); the retest pilot (second seed); always go; pass@k only
    (go where pass@k - greedy >= PASSK_MARGIN)."""
    passk = start["pass_at_k"] is not None and start["greedy"] is not None
    return {"start": _MAP[start["verdict"]], "pilot": _MAP[pilots[0]["verdict"]],
            "pilot_retest": _MAP[pilots[1]["verdict"]] if len(pilots) > 1 else CANT_TELL, "always_go": GO,
            "passk_only": (GO if start["pass_at_k"] - start["greedy"] >= PASSK_MARGIN else NO_GO) if passk else CANT_TELL}


PREFIX_RISE = 0.02  #: run_prefix rule: the second half of the first quarter's rewards above the first by this


def prefix_verdict(rewards: list[float], steps: int) -> str:
    """EXPLORATORY (not the headline, no target): the run's own first quarter as the pilot, free of extra
    cost. Over the first ``steps`` training steps of seed TRAIN_SEEDS[0]: go where the mean step reward of
    the second half exceeds the first half's by >= PREFIX_RISE, else no go; can't tell with < 2 steps.
    That seed is one of the label's six, so this rule is partly scored on its own run."""
    r = rewards[:steps]
    if len(r) < 2 or len(r) < steps:
        return CANT_TELL
    h = len(r) // 2
    return GO if sum(r[h:]) / len(r[h:]) - sum(r[:h]) / h >= PREFIX_RISE else NO_GO


def prefix_eval_verdict(recs: dict) -> str:
    """EXPLORATORY: the run's own first quarter as the pilot, read by the preflight's pilot rule
    (:func:`grpolab.diagnostics.preflight.pilot.pilot_rule`: the paired change of greedy success on the
    preflight's items between the starting model and seed TRAIN_SEEDS[0]'s checkpoint after pilot_steps()
    steps; can't tell where none of those steps had a group with signal)."""
    from grpolab.diagnostics.preflight.pilot import pilot_rule

    after = recs[("prefix_eval", TRAIN_SEEDS[0])]["data"]
    start = recs[("eval_start", 0)]["data"]
    n = len(after["solved"])
    if start["prompts"][:n] != after["prompts"]:
        raise ValueError("the first-quarter model was evaluated on other items than the start's first ones")
    train = recs[("train", TRAIN_SEEDS[0])]["data"]
    steps = max(1, round(len(train.get("reward_mean", [])) * PILOT_FRACTION))
    updates = sum(x > 0 for x in train.get("with_signal", [])[:steps])
    return _MAP[str(pilot_rule([float(x) for x in start["solved"][:n]], [float(x) for x in after["solved"]],
                               updates=updates))]


def hit(verdict: str, label: str) -> bool:
    """A verdict agrees with a label: go with gain, no go with no gain (a degenerate gain is no gain);
    "can't tell" and an "unclear" label are misses."""
    return (verdict == GO and label == GAIN) or (verdict == NO_GO and label in (NO_GAIN, "degenerate gain"))


# ---- the report ------------------------------------------------------------------------------------------
RULES = ("pilot", "start", "always_go", "passk_only")
#: reported beside, never the headline: the run's own first quarter (issue 59 item 4: cheaper signals) and
#: the same pilot with no budget (what the pilot decides when it may cost what it costs; its cost is reported)
EXPLORATORY = ("run_prefix", "prefix_eval", "pilot_full")
#: the paired comparisons between rules (exact McNemar over settings); the first two are the targets
PAIRS = (("pilot", "always_go"), ("pilot", "start"), ("start", "always_go"), ("pilot", "passk_only"))


def load_records(root: Path) -> dict[str, dict[tuple[str, int], dict]]:
    """``setting name -> (stage, seed) -> record`` from ROOT/records/ (failed attempts left out)."""
    out: dict[str, dict] = {}
    for p in sorted((root / "records").glob("*/*.json")):
        if ".failed-" in p.name:
            continue
        r = json.loads(p.read_text())
        out.setdefault(r["setting"], {})[(r["stage"], r["seed"])] = r
    return out


def setting_row(name: str, recs: dict) -> dict | None:
    """One setting's label, verdicts, hits and costs; None while a stage it needs is missing."""
    need = [("start_verdict", MEASURE_SEED), ("eval_start", 0), *[("pilot", p) for p in PILOT_SEEDS],
            ("pilot_full", PILOT_SEEDS[0]), ("prefix_eval", TRAIN_SEEDS[0]),
            *[(st, s) for s in TRAIN_SEEDS for st in ("train", "eval_final")]]
    if any(k not in recs for k in need):
        return None
    seeds = [seed_gain(recs[("eval_start", 0)]["data"], recs[("eval_final", s)]["data"]) for s in TRAIN_SEEDS]
    label = setting_label(seeds)
    verdicts = rule_verdicts(recs[("start_verdict", MEASURE_SEED)]["data"],
                             [recs[("pilot", p)]["data"] for p in PILOT_SEEDS])
    steps = max(1, round(len(recs[("train", TRAIN_SEEDS[0])]["data"].get("reward_mean", [])) * PILOT_FRACTION))
    verdicts["pilot_full"] = _MAP[recs[("pilot_full", PILOT_SEEDS[0])]["data"]["verdict"]]
    verdicts["prefix_eval"] = prefix_eval_verdict(recs)
    verdicts["run_prefix"] = prefix_verdict(recs[("train", TRAIN_SEEDS[0])]["data"].get("reward_mean", []), steps)
    run_cpu = sorted(recs[("train", s)]["cpu_s"] for s in TRAIN_SEEDS)[len(TRAIN_SEEDS) // 2]  # median
    cost = {"start": recs[("start_verdict", MEASURE_SEED)]["cpu_s"] / run_cpu,
            "pilot": recs[("pilot", PILOT_SEEDS[0])]["cpu_s"] / run_cpu, "always_go": 0.0}
    cost["passk_only"] = cost["start"]
    cost["pilot_full"] = recs[("pilot_full", PILOT_SEEDS[0])]["cpu_s"] / run_cpu
    # its extra cost: the first-quarter model's evaluation and the start's on the same items (taken as
    # equal); the quarter of training is the run's own (spent anyway when it goes on)
    cost["prefix_eval"] = 2 * recs[("prefix_eval", TRAIN_SEEDS[0])]["cpu_s"] / run_cpu
    cost["run_prefix"] = 0.0  # no extra cost: the run's own first quarter (PILOT_FRACTION of its steps)
    return {"setting": name, "seeds": dict(zip(map(str, TRAIN_SEEDS), seeds)), **label, "verdicts": verdicts,
            "hits": {r: hit(verdicts[r], label["label"]) for r in (*RULES, *EXPLORATORY, "pilot_retest")},
            "cost_share": cost, "run_cpu_s": run_cpu,
            "pilot_causes": [recs[("pilot", p)]["data"].get("cause") for p in PILOT_SEEDS],
            "pilot_stages": [recs[("pilot", p)]["data"].get("stage") for p in PILOT_SEEDS],
            "pilot_updates": [recs[("pilot", p)]["data"].get("pilot_updates") for p in PILOT_SEEDS]}


def _share(k: int, n: int) -> dict:
    lo, hi = wilson_interval(k, n)
    return {"k": k, "n": n, "value": k / n if n else None, "low": lo, "high": hi}


def summarise(rows: list[dict], n_planned: int) -> dict:
    """Agreement per rule over ALL planned settings (a setting not finished, a "can't tell" verdict and an
    "unclear" label are misses), Wilson intervals, paired McNemar tests, the pilot's test-retest, costs."""
    agree = {r: _share(sum(x["hits"][r] for x in rows), n_planned) for r in (*RULES, *EXPLORATORY)}
    pad = lambda r: [x["hits"][r] for x in rows] + [False] * (n_planned - len(rows))  # noqa: E731
    pairs = {f"{a} vs {b}": mcnemar_items(pad(a), pad(b)).to_dict() for a, b in PAIRS}
    same = sum(x["verdicts"]["pilot"] == x["verdicts"]["pilot_retest"] for x in rows)
    costs = {r: sorted(x["cost_share"][r] for x in rows) for r in (*RULES, *EXPLORATORY)}
    median = {r: (v[len(v) // 2] if v else None) for r, v in costs.items()}
    beats = lambda b: pairs[f"pilot vs {b}"]["p_value"] < ALPHA and pairs[f"pilot vs {b}"]["value"] > 0  # noqa: E731
    return {"settings_planned": n_planned, "settings_finished": len(rows), "agreement": agree, "pairs": pairs,
            "headline": agree["pilot"],
            "test_retest": _share(same, len(rows)),
            "labels": dict(Counter(x["label"] for x in rows)), "median_cost_share": median,
            "pilots_without_update": sum(x["pilot_updates"][0] == 0 for x in rows),
            "pilot_stages": dict(Counter(str(x["pilot_stages"][0]) for x in rows)),
            "targets": {"pilot >= 80% of all": (agree["pilot"]["value"] or 0) >= 0.8,
                        "pilot beats always go (McNemar)": beats("always_go"),
                        "pilot beats start (McNemar)": beats("start"),
                        "start >= 70% of all": (agree["start"]["value"] or 0) >= 0.7,
                        "pilot median cost <= 25% of a run": median["pilot"] is not None and median["pilot"] <= COST_SHARE}}


def report(root: Path, settings: list[Setting], commit: str | None) -> dict:
    recs = load_records(root)
    rows = [r for s in settings if (r := setting_row(s.name, recs.get(s.name, {}))) is not None]
    return {"protocol_commit": commit, "settings": [{"name": s.name, "stratum": s.stratum, "high_lr": s.high_lr,
                                                     "recipe": asdict(s.recipe)} for s in settings],
            "rows": rows, "summary": summarise(rows, len(settings))}


def _pct(d: dict) -> str:
    return "-" if d["value"] is None else f"{d['k']}/{d['n']} ({100 * d['value']:.0f}%, 95% Wilson [{100 * d['low']:.0f}, {100 * d['high']:.0f}])"


def markdown(rec: dict) -> str:
    """The page: headline first, then every rule, the paired tests, the retest, costs and every setting."""
    s = rec["summary"]
    lines = ["# Held-out calibration of `grpolab preflight` (issue 59)", "",
             f"Protocol frozen at commit `{rec['protocol_commit']}`; {s['settings_finished']} of "
             f"{s['settings_planned']} settings finished (an unfinished one counts as a miss).", "",
             f"**Headline: the pilot verdict agrees with the label on {_pct(s['headline'])} of all settings** "
             "(can't tell and unclear labels count as misses).", "", "| rule | agrees (share of all) | median cost (share of one seed's run, CPU) |",
             "|---|---|---|"]
    for r in (*RULES, *EXPLORATORY):
        c = s["median_cost_share"][r]
        tag = " (exploratory)" if r in EXPLORATORY else ""
        lines.append(f"| {r}{tag} | {_pct(s['agreement'][r])} | {'-' if c is None else format(c, '.2f')} extra |")
    lines += ["", "| paired (exact McNemar over settings) | first right only | second right only | p |", "|---|---|---|---|"]
    lines += [f"| {k} | {v['gained']} | {v['lost']} | {v['p_value']:.3g} |" for k, v in s["pairs"].items()]
    lines += ["", f"Pilot test-retest (same verdict on pilot seeds {PILOT_SEEDS}): {_pct(s['test_retest'])}.",
              "", "Targets: " + "; ".join(f"{k}: {'met' if v else 'not met'}" for k, v in s["targets"].items()) + ".",
              "", "| setting | label | mean gain [95% t] | mde | degenerate seeds | start | pilot | retest | pass@k | pilot cost |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rec["rows"]:
        t, v = r["test"], r["verdicts"]
        lines.append(f"| {r['setting']} | {r['label']} | {100 * t['value']:+.1f} [{100 * t['low']:+.1f}, {100 * t['high']:+.1f}] | "
                     f"{100 * t['mde']:.1f} | {r['degenerate_seeds']} | {v['start']} | {v['pilot']} | {v['pilot_retest']} | "
                     f"{v['passk_only']} | {r['cost_share']['pilot']:.2f} |")
    return "\n".join(lines) + "\n"


# ---- the pre-freeze check (builds configs and tasks; loads no model, measures nothing) ------------------
def check_setup(s: Setting, root: Path) -> dict:
    """Whether a setting's config validates (``grpolab.config.load_config``) and how many held-out items its
    task holds: what a reviewer checks before the freeze. ``error`` names what is missing in this checkout
    (a task not merged, a package not installed) instead of raising."""
    from grpolab.config import load_config
    from grpolab.tasks.base import get_task

    try:
        cfg = load_config(s.config, s.overrides(root))
        task = get_task(cfg.task.name, **dict(cfg.task.options))
        held_out = (task.available("eval") if callable(getattr(task, "available", None))
                    else len(task.items("eval", s.label_items())))
        extra = rg_criterion(task, s.label_items()) if s.task == "reasoning_gym" else {}
        if s.model == "tiny":
            tiny_encodable(s, task)
    except Exception as e:  # noqa: BLE001 -- reported, one line per setting
        return {"setting": s.name, "ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"}
    return {"setting": s.name, "ok": not extra or extra["meets_a_c"], "held_out": held_out,
            "label_items": min(held_out, s.label_items()), **extra}


def tiny_encodable(s: Setting, task) -> None:
    """Raise ValueError where the tiny model's tokenizer (the alphabet its warm start is built with) cannot
    encode a held-out prompt, reference or demonstration of the setting."""
    from grpolab.models.tokenizer import DEFAULT_ALPHABET, PRINTABLE_ALPHABET, build_tokenizer, check_encodable

    tok = build_tokenizer(PRINTABLE_ALPHABET if "model.tokenizer_alphabet=printable" in s.warm else DEFAULT_ALPHABET)
    for it in task.items("eval", min(64, task.available("eval")) if callable(getattr(task, "available", None)) else 64):
        for text in (it.prompt, str(it.reference), str(it.demonstration or "")):
            check_encodable(tok, text, tok(text, add_special_tokens=False)["input_ids"])


def rg_criterion(task, n: int) -> dict:
    """RG_CRITERION's (a) and (c) on a reasoning-gym setting's held-out items (read, not answered): every
    reference one integer of at most 4 digits; >= 200 distinct held-out questions. (b) and (d) are judged
    in the README, per family."""
    items = task.items("eval", min(n, task.available("eval")) if callable(getattr(task, "available", None)) else n)
    refs = [str(it.reference).strip() for it in items]
    integer = all(r.lstrip("-").isdigit() and len(r.lstrip("-")) <= 4 for r in refs)
    distinct = len({it.prompt for it in items})
    return {"answers_integer_4_digits": integer, "distinct_held_out_questions": distinct,
            "meets_a_c": integer and distinct >= 200}


# ---- the command line --------------------------------------------------------------------------------------
def dry_run(settings: list[Setting]) -> str:
    """The plan: every setting's recipe, stages and ESTIMATED CPU seconds (from recipe sizes, not measured)."""
    lines = [f"{len(settings)} settings x ({len(TRAIN_SEEDS)} training seeds {TRAIN_SEEDS}, start verdict, pilots on "
             f"seeds {PILOT_SEEDS}, greedy evals); ESTIMATED CPU seconds from recipe sizes (not a measurement):"]
    total = 0.0
    for s in settings:
        e, r = estimate_seconds(s), s.recipe
        total += e["total"]
        lines.append(f"  {s.name:42s} {r.steps:3d} steps x {r.prompts_per_step} x {r.group_size}, lr {r.lr:g}, cap "
                     f"{r.max_new_tokens}, pilot {s.pilot_steps()} steps, label on {s.label_items()} items: "
                     f"run ~{e['run']:.0f} s, all stages ~{e['total'] / 3600:.1f} h")
        lines.append(f"      {s.config or '(no config file)'} " + " ".join(f"--set '{x}'" for x in s.overrides(Path("ROOT")))
                     + (f"  [warm start: grpolab sft {' '.join(s.warm)}]" if s.warm else ""))
    lines.append("held-out items: the task's first min(held-out, label items) eval items, the same for start and "
                 "final (`grpolab eval --n`); ROOT is --root")
    lines.append(f"estimated total: ~{total / 3600:.0f} CPU hours; stages in run order: {len(plan(settings))}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="runs/heldout", help="records, runs and logs (resumable)")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and estimated cost; run nothing")
    ap.add_argument("--only", nargs="*", default=None, help="setting names (default: all)")
    ap.add_argument("--strata", nargs="*", default=None, help="strata (default: all); two runners on disjoint "
                    "strata share no warm start, so they may run side by side on a 2-core machine")
    ap.add_argument("--check", action="store_true", help="validate every setting's config and count its held-out "
                    "items (loads no model); the reviewer's check before the freeze")
    ap.add_argument("--report", action="store_true", help="write --json/--md from the records; run nothing")
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    args = ap.parse_args(argv)
    settings = draw_settings()
    clashes = in_sample_clashes(settings)
    if clashes:
        raise SystemExit(f"error: settings repeat the in-sample calibration: {clashes}")
    chosen = [s for s in settings if (args.only is None or s.name in args.only)
              and (args.strata is None or s.stratum in args.strata)]
    if args.dry_run:
        print(dry_run(chosen))
        return
    root = Path(args.root)
    if args.check:
        for s in chosen:
            print(json.dumps(check_setup(s, root)))
        return
    if args.report:
        rec = report(root, settings, frozen_commit())
        if args.json:
            atomic_write_json(args.json, rec)
        if args.md:
            atomic_write_text(args.md, markdown(rec))
        print(json.dumps(rec["summary"]["headline"]))
        return
    try:
        import grpolab

        if Path(grpolab.__file__).resolve().parents[1] != ROOT / "src":
            raise RuntimeError(f"grpolab is imported from {Path(grpolab.__file__).parent}, not this checkout's "
                               f"src/: run with PYTHONPATH={ROOT / 'src'}")
        commit = frozen_commit()
        for st in plan(chosen):
            rec = execute(st, root, commit)
            print(f"{st.setting.name} {st.stage}-{st.seed}: {'done' if rec else 'not ready or failed'}", flush=True)
    except RuntimeError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
