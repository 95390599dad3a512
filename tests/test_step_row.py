"""grpolab.step_row: the one table of the step row's keys. Every key a real run writes is declared
(a tiny 2-step run of the default trainer, with credit, dynamic sampling + overlong shaping, and a
multi-turn environment), every declared key of the always-written groups is written, docs/metrics.md
is the table rendered, the other docs name only declared keys, and the modules that compute a
step-row number name it through the table, never with a string of their own."""

import ast
import json
import math
import re
from pathlib import Path

import pytest

from grpolab import step_row as K
from grpolab.config import load_config
from grpolab.train import train

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.n_train=64", "task.n_eval=8", "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=16", "sft.n_eval=8",
    "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=16", "trainer.steps=2",
    "trainer.eval_every=2", "trainer.save_every=2", "log.progress=false", "log.plots=false",
    "log.tensorboard=false", "trainer.preflight=false",
]
ARITH = ["task.options.max_digits=1", "task.options.max_terms=3"]
#: the modules where a step-row number is born: no key string of their own
#: (test_producers_name_no_step_metric_of_their_own)
PRODUCERS = ("train/step_metrics.py", "train/loop.py", "train/watch.py", "train/policy_update.py",
             "train/step_batch.py", "train/credit.py", "objectives/credit_row.py")
#: the trainer's readers of the row: no ``prefix/name`` key string (their bare words such as
#: ``accuracy`` name other records too: summary.json, the evaluation history)
READERS = ("train/report.py",)


#: (module, key) -> why the string is still there
EXEMPT: dict[tuple[str, str], str] = {}


def _run(tmp_path, *extra, monkeypatch=None):
    if monkeypatch is not None:  # the tiny model solves nothing: give the credit step rows to score
        from grpolab import objectives as obj

        real = obj.get_advantage_estimator

        def mixed(name):
            def adv(rewards, group_ids):  # a deterministic mix of signs (as tests/train/test_credit_train.py)
                import torch

                return real(name)(rewards, group_ids) + torch.tensor([(-1.0) ** i for i in range(len(rewards))])
            return adv

        monkeypatch.setattr(obj, "get_advantage_estimator", mixed)
    train(load_config(overrides=SMALL + [f"trainer.run_dir={tmp_path}", *extra]), log=lambda *_: None)
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("extra, groups", [
    (ARITH + ["log.metric_names=both"], ("batch", "update", "eval")),
    (ARITH + ["credit.name=rlsd"], ("credit",)),
    (ARITH + ["rollout.dynamic_sampling=true", "objective.overlong_buffer=4"], ("sampling",)),
    (["task.name=tool_arith", "env.name=tool_arith", "env.max_total_tokens=48", "env.max_turn_tokens=16"],
     ("episode",)),
], ids=["default", "rlsd", "dynamic_sampling", "env"])
def test_every_key_a_real_run_writes_is_declared(tmp_path, monkeypatch, extra, groups):
    rows = _run(tmp_path, *extra, monkeypatch=monkeypatch if "credit" in groups else None)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert K.undeclared(r) == []
    written = set(rows[0])
    # and the table declares nothing a run of that kind does not write (cuda: only with a GPU;
    # the credit KL: GEAR with the full-vocabulary KL; segments: GEAR)
    optional = {K.MEMORY_CUDA_PEAK_MB, K.CREDIT_KL, "credit/segments_per_seq", "credit/segment_len",
                "credit/segment_token_frac"}
    for group in groups + ("run",):
        missing = [k for k in K.group_keys(group) if k not in written and k not in optional]
        assert missing == [], (group, missing)
    if "log.metric_names=both" in extra:
        assert {K.VERL_NAMES[k] for k in written if k in K.VERL_NAMES} | set(K.VERL_SUMS) <= written


def test_an_undeclared_key_is_refused():
    with pytest.raises(KeyError, match="'update/new_stat' is not declared; add it to grpolab.step_row.STEP_METRICS"):
        K.row_key(K.UPDATE, "new_stat")
    with pytest.raises(KeyError, match="'reward/mean_typo'"):
        K.checked({K.REWARD_MEAN: 1.0, "reward/mean_typo": 2.0})
    assert K.row_key(K.UPDATE, "clip_frac_by_pos/1-16") == "update/clip_frac_by_pos/1-16"
    assert K.stat_name(K.UPDATE, K.UPDATE_DRIFT_BY_POS, "17-64") == "cum_log_ratio_rms_by_pos/17-64"
    assert K.declared("actor/pg_clipfrac") and not K.declared("update/clip_frac_by_pos/<bucket>")
    assert all(m.meaning and m.group in K.GROUPS for m in K.STEP_METRICS.values())


def test_docs_metric_table_is_the_registry():
    page = (ROOT / "docs" / "metrics.md").read_text()
    m = re.search(r"<!-- step_row:begin -->\n(.*)<!-- step_row:end -->", page, re.S)
    assert m, "docs/metrics.md lost its step_row markers"
    assert m.group(1).strip() == K.markdown_tables().strip(), (
        "docs/metrics.md differs from grpolab.step_row; paste the output of "
        "python -c 'from grpolab.step_row import markdown_tables; print(markdown_tables())' between its markers")


_KEYLIKE = re.compile(r"`((?:reward|length|update|groups|advantages|time|eval|credit|episode|memory|"
                      r"dynamic_sampling|prompt_length|actor|critic|response_length|timing_s|perf)/[A-Za-z0-9_/+-]+)`")


@pytest.mark.parametrize("page", ["real-models.md", "credit.md", "envs.md", "methods.md", "when-grpo-helps.md",
                                  "performance.md"])
def test_other_docs_name_only_declared_keys(page):
    named = set(_KEYLIKE.findall((ROOT / "docs" / page).read_text()))
    assert [k for k in sorted(named) if not K.declared(k)] == []


def test_the_verl_aliases_in_real_models_md_are_the_registrys():
    text = (ROOT / "docs" / "real-models.md").read_text()
    table = text[text.index("| grpolab | verl-style alias | note |"):].split("\n\n")[0]
    for line in table.splitlines()[2:]:
        ours, theirs = (re.findall(r"`([^`]+)`", cell) for cell in line.split("|")[1:3])
        if " + " in line.split("|")[1]:          # a sum
            assert tuple(ours) == K.VERL_SUMS[theirs[0]]
            continue
        prefix = ours[0].rsplit("/", 1)[0]
        for o, t in zip(ours, theirs):           # `/max` shorthand: the first entry's prefix
            o = o if not o.startswith("/") else prefix + o
            t = t if not t.startswith("/") else theirs[0].rsplit("/", 1)[0] + t
            assert K.VERL_NAMES[o] == t, (o, t)


def _strings(path: Path) -> list[tuple[int, str, bool]]:
    """String constants of a module, docstrings left out: ``(line, text, written as a key)``, the
    last when it is a dict display's key or the index of a subscript stored to."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    as_key = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
    as_key |= {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store)}
    return [(n.lineno, n.value, id(n) in as_key) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


def test_producers_name_no_step_metric_of_their_own():
    """No step-row key as a string in a producer: a key with a ``/`` anywhere, a bare one
    (``accuracy``, ``lr``: also the names of other records) where it is written as a key."""
    keys = {k for m in K.STEP_METRICS for k in K.expand(m)} | set(K.VERL_NAMES.values())
    prefixes = tuple({m.split("/")[0] + "/" for m in K.STEP_METRICS if "/" in m})
    found = []
    for rel in PRODUCERS + READERS:
        for line, s, is_key in _strings(ROOT / "src" / "grpolab" / rel):
            if (rel, s) in EXEMPT:
                continue
            bare = s in keys and is_key and rel in PRODUCERS
            if ("/" in s and (s in keys or (s.startswith(prefixes) and " " not in s))) or bare:
                found.append(f"{rel}:{line}: {s!r}")
    assert found == [], "step-row keys belong in grpolab.step_row: " + "; ".join(found)


def test_the_trainer_refuses_a_row_with_an_undeclared_key(tmp_path, monkeypatch):
    import grpolab.train.loop as loop

    monkeypatch.setattr(loop, "memory_metrics", lambda: {"memory/new_gauge": 1.0})
    with pytest.raises(KeyError, match="'memory/new_gauge' are not declared"):
        _run(tmp_path, *ARITH, "trainer.steps=1")
