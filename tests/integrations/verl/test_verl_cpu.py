"""verl's real trainer end to end on CPU (grpolab.integrations.verl.cpu), in CI's verl environment.

The end-to-end tests (marker ``verl_e2e``; CI's verl block runs them) launch
``python -m grpolab.integrations.verl.cpu`` -- verl's own ``main_ppo`` / grpolab's ``verl_main``
with Ray, TransferQueue, verl's FSDP2 engine over gloo and the ``hf_cpu`` rollout -- for 2 steps
on a 31 K-parameter tiny Llama with a chat template, built from a config in a temporary
directory (nothing downloaded), and read verl's own metric log (its ``file`` logger):

- ``main_ppo`` with grpolab's ``ctpo`` policy loss and ``grpolab_balanced`` estimator: verl logs
  ``actor/grpolab/*`` (the loss ran inside verl's engine) and a non-zero gradient norm;
- ``verl_main`` with RLSD and with GEAR: ``credit/*`` (the teacher forward ran on verl's
  reference worker) and a non-zero gradient norm.

While each run lasts, the test reads the listening TCP sockets of every process of the run
(``/proc/<pid>/net/tcp{,6}``, which shows the socket table of that process's network namespace):
the run is in its own namespace whose only interface is ``lo``, and every listener is on a
loopback address or on the wildcard address of that loopback-only namespace; none is on another
address. The faster tests check the pieces without Ray: the rollout server against Hugging Face's
own greedy ``generate``, its weight sync, the launcher's overrides and refusals, and that a verl
model builds next to TRL 1.16.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

if os.environ.get("GRPOLAB_REQUIRE_VERL"):  # the CI's verl environment: a missing verl is a failure
    import transfer_queue  # noqa: F401
    import verl  # noqa: F401
else:
    pytest.importorskip("verl", reason="verl runs in its own environment: pip install -e '.[test,verl]'")
    pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue: pip install -e '.[verl]'")

from grpolab.integrations.verl import cpu as verl_cpu  # noqa: E402
from grpolab.integrations.verl.cpu import toy  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
TOY = ROOT / "src/grpolab/integrations/verl/cpu/toy.py"
TEACHER = "{prompt} here is a reference solution: {privileged} solve it. {prompt}"


# ---------------------------------------------------------------------------------------------
# pieces, without Ray


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return toy.write_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def _server(model_dir, **kw):
    from grpolab.integrations.verl.cpu.rollout import HFRolloutServer

    return HFRolloutServer(str(model_dir), response_length=kw.pop("response_length", 12), prompt_length=16,
                           seed=0, **kw)


def test_rollout_server_greedy_equals_hf_generate(tiny_dir):
    """A batch of ragged prompts (left-padded together) gives each prompt HF's own greedy continuation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import asyncio

    server = _server(tiny_dir)
    tok = AutoTokenizer.from_pretrained(str(tiny_dir))
    ref = AutoModelForCausalLM.from_pretrained(str(tiny_dir)).eval()
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=True)["input_ids"]
               for p in ("7+5=", "12+3-4=", "1=")]

    async def ask():
        return await asyncio.gather(*[server.generate(prompt_ids=p, sampling_params={"temperature": 0.0, "logprobs": True},
                                                      request_id=str(i)) for i, p in enumerate(prompts)])

    outs = asyncio.run(ask())
    for p, out in zip(prompts, outs):
        want = ref.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id,
                            eos_token_id=tok.eos_token_id)[0, len(p):].tolist()
        if tok.eos_token_id in want:
            want = want[: want.index(tok.eos_token_id) + 1]
        assert out.token_ids == want
        logits = ref(torch.tensor([p + out.token_ids])).logits[0, len(p) - 1:-1]
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(out.log_probs), lp, atol=1e-4)


def test_rollout_server_weight_sync_changes_generation(tiny_dir):
    """load_weights copies the trainer's tensors in: the server then generates like the new weights."""
    import asyncio

    from transformers import AutoModelForCausalLM

    server = _server(tiny_dir)
    other = AutoModelForCausalLM.from_pretrained(str(tiny_dir))
    torch.manual_seed(1)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    prompt = [1, 11, 42, 9, 46]

    def greedy():
        return asyncio.run(server.generate(prompt_ids=prompt, sampling_params={"temperature": 0}, request_id="a")).token_ids

    before = greedy()
    n = server.load_weights({k: v.clone() for k, v in other.state_dict().items()}, global_steps=3)
    want = other.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, pad_token_id=0,
                          eos_token_id=2)[0, len(prompt):].tolist()
    if 2 in want:
        want = want[: want.index(2) + 1]
    assert n == len(other.state_dict())
    assert greedy() == want != before
    assert server.stats() == {"weight_updates": 1, "global_steps": 3}
    with pytest.raises(KeyError, match="not in the rollout model"):
        server.load_weights({"no.such.weight": torch.zeros(1)})


def test_cpu_overrides_defaults_and_caller_wins():
    out = verl_cpu.cpu_overrides(["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.name=hf_cpu",
                                  "data.train_batch_size=4"])
    keys = [o.split("=", 1)[0].lstrip("+") for o in out]
    assert len(keys) == len(set(keys))  # no key twice: the caller's value is the only one
    assert "trainer.n_gpus_per_node=2" in out and "trainer.device=cpu" in out
    assert "+ray_kwargs.ray_init.num_gpus=2" in out  # one logical Ray GPU per training process
    assert out[-3:] == ["trainer.n_gpus_per_node=2", "actor_rollout_ref.rollout.name=hf_cpu", "data.train_batch_size=4"]
    env = verl_cpu.cpu_env({"VERL_USE_EXTERNAL_MODULES": "mine"})
    assert env["VERL_USE_EXTERNAL_MODULES"] == "mine,grpolab.integrations.verl.cpu"
    assert env["VERL_PLATFORM"] == "cpu"


def test_launcher_refuses_other_verl_and_unknown_target(monkeypatch, capsys):
    from grpolab.integrations.verl.cpu import __main__ as launcher

    assert launcher.main(["train_ppo"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: unknown target 'train_ppo'")
    import importlib.metadata

    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.10.0" if name == "verl" else real(name))
    assert launcher.main(["main_ppo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: grpolab's verl CPU backend supports verl>=0.9.1,<0.10 only")
    assert "found verl 0.10.0" in err[0]
    with pytest.raises(verl_cpu.VerlVersionError, match="found verl 0.10.0"):
        verl_cpu.register()  # the plug-in itself refuses too, before touching verl


def test_platform_engine_and_rollout_register_in_a_verl_process():
    """With VERL_PLATFORM=cpu and the module named in VERL_USE_EXTERNAL_MODULES, `import verl` gives
    verl the CPU platform (not the nvidia fallback), verl's FSDP engine for device cpu and hf_cpu."""
    code = (
        "import verl\n"
        "from verl.utils.device import get_device_name, get_nccl_backend\n"
        "from verl.workers.engine.base import EngineRegistry\n"
        "from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead\n"
        "from verl.workers.rollout.base import get_rollout_class\n"
        "from verl.workers.rollout.replica import get_rollout_replica_class\n"
        "print(get_device_name(), get_nccl_backend(), EngineRegistry.get_engine_cls('language_model', 'fsdp2') "
        "is FSDPEngineWithLMHead, get_rollout_class('hf_cpu').__name__, get_rollout_replica_class('hf_cpu').__name__)\n"
    )
    env = verl_cpu.cpu_env()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-5:] == ["cpu", "gloo", "True", "HFCPURolloutAdapter", "HFCPURolloutReplica"]


def test_verl_model_builds_next_to_trl_1_16(tiny_dir):
    """verl's model patching imports TRL's value-head model whenever TRL is importable; TRL 1.16 has
    none. With grpolab's plug-in loaded (every `import verl`), verl's own patch step runs."""
    code = (
        "import verl, trl\n"
        "from transformers import AutoModelForCausalLM\n"
        "from grpolab.integrations.verl.losses import trl_has_value_head\n"
        "from verl.models.transformers.monkey_patch import apply_monkey_patch\n"
        f"m = AutoModelForCausalLM.from_pretrained({str(tiny_dir)!r})\n"
        "apply_monkey_patch(m, use_remove_padding=False)\n"
        "print(trl.__version__, trl_has_value_head())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, has = proc.stdout.split()[-2:]
    if has == "False":  # the environment this guards: verl would have raised ImportError here
        off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none"))
        assert off.returncode != 0 and "AutoModelForCausalLMWithValueHead" in off.stderr


# ---------------------------------------------------------------------------------------------
# end to end: verl's trainer, 2 steps


def _children(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        out.add(p)
        todo.extend(kids.get(p, []))
    return out


def _listeners(pid: int) -> list[str]:
    """Listening TCP addresses in the network namespace of ``pid`` (``/proc/<pid>/net/tcp{,6}``)."""
    found = []
    for name, fam in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[3] != "0A":  # LISTEN
                continue
            hexaddr = parts[1].split(":")[0]
            raw = bytes.fromhex(hexaddr)
            if fam == socket.AF_INET:
                addr = socket.inet_ntop(fam, raw[::-1])
            else:
                addr = socket.inet_ntop(fam, b"".join(struct.pack("<I", x) for x in struct.unpack(">4I", raw)))
            found.append(addr)
    return found


def _interfaces(pid: int) -> set[str]:
    try:
        lines = Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]
    except OSError:
        return set()
    return {line.split(":", 1)[0].strip() for line in lines}


LOOPBACK = ("127.", "::1", "::ffff:127.")
WILDCARD = ("0.0.0.0", "::")


def run_verl(tmp_path: Path, target: str, extra: list[str], tiny: Path) -> tuple[list[dict], dict]:
    """Launch 2 verl steps; return verl's metric rows and what the socket watch saw."""
    from grpolab.integrations.verl.cpu.__main__ import netns_prefix

    if netns_prefix() is None and not os.environ.get("GRPOLAB_REQUIRE_VERL"):
        pytest.skip("no loopback-only network namespace can be made here (unshare --net, as root or in a "
                    "user namespace); the launcher refuses to run Ray on the machine's network")
    train = toy.write_arith_parquet(tmp_path / "train.parquet", toy.arith_items("train", 32))
    val = toy.write_arith_parquet(tmp_path / "val.parquet", toy.arith_items("eval", 8), split="eval")
    log = tmp_path / "metrics.jsonl"
    overrides = [
        f"data.train_files={train}", f"data.val_files={val}", "data.train_batch_size=4",
        "data.max_prompt_length=16", "data.max_response_length=16", f"actor_rollout_ref.model.path={tiny}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.use_kl_loss=false",
        f"reward.custom_reward_function.path={TOY}", "reward.custom_reward_function.name=compute_partial_score",
        "trainer.total_training_steps=2", "trainer.logger=[console,file]", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.project_name=t", "trainer.experiment_name=t", *extra,
    ]
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log), OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "grpolab.integrations.verl.cpu", target, *overrides],
                            stdout=open(tmp_path / "run.log", "w"), stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    seen = {"listeners": set(), "interfaces": set(), "namespaces": set(), "processes": 0}
    own_ns = os.readlink("/proc/self/ns/net")
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            pids = _children(proc.pid)
            seen["processes"] = max(seen["processes"], len(pids))
            for p in pids:
                try:
                    ns = os.readlink(f"/proc/{p}/ns/net")
                except OSError:
                    continue
                seen["namespaces"].add(ns)
                if ns != own_ns:
                    seen["listeners"].update(_listeners(p))
                    seen["interfaces"].update(_interfaces(p))
            stop.wait(1.0)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        rc = proc.wait(timeout=900)
    finally:
        stop.set()
        t.join()
        if proc.poll() is None:
            proc.kill()
    out = (tmp_path / "run.log").read_text()
    assert rc == 0, out[-4000:]
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return rows, seen


def check_loopback_only(seen: dict) -> None:
    own_ns = os.readlink("/proc/self/ns/net")
    run_ns = seen["namespaces"] - {own_ns}
    assert len(run_ns) == 1, seen["namespaces"]  # every process of the run, in one namespace of its own
    assert seen["interfaces"] == {"lo"}, seen["interfaces"]
    assert seen["listeners"], "no listener seen: the watch did not see Ray (the check would be vacuous)"
    bad = sorted(a for a in seen["listeners"] if not a.startswith(LOOPBACK) and a not in WILDCARD)
    assert not bad, f"listeners outside loopback: {bad}"


def metrics_by_step(rows: list[dict]) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in rows:
        out.setdefault(int(r["step"]), {}).update(r["data"])
    return out


def check_gradients_follow_advantages(steps: dict[int, dict]) -> None:
    """Each step's gradient is non-zero exactly where its advantages are: a step whose sampled
    responses all scored the same (the untrained tiny model, by chance) has zero advantages and must
    give a zero gradient; at least one step must have learned something."""
    moved = 0
    for s, m in steps.items():
        if m["critic/advantages/max"] != 0 or m["critic/advantages/min"] != 0:
            assert m["actor/grad_norm"] > 0, f"step {s}: advantages but no gradient"
            moved += 1
        else:
            assert m["actor/grad_norm"] == 0, f"step {s}: zero advantages yet a gradient"
    assert moved >= 1, "no step had a group with differing rewards"


@pytest.mark.verl_e2e
def test_main_ppo_with_grpolab_losses_on_cpu(tmp_path, tiny_dir):
    rows, seen = run_verl(tmp_path, "main_ppo", ["algorithm.adv_estimator=grpolab_balanced",
                                                 "actor_rollout_ref.actor.policy_loss.loss_mode=ctpo",
                                                 "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"],
                          tiny_dir)
    steps = metrics_by_step(rows)
    assert sorted(steps) == [1, 2]
    for s in (1, 2):
        m = steps[s]
        assert {"actor/grpolab/ratio_mean", "actor/grpolab/clip_frac_low", "actor/grpolab/clip_frac_high"} <= set(m)
        # the rollout server generated with the trainer's current weights (synced every step)
        assert m["training/rollout_probs_diff_max"] < 1e-2
    check_gradients_follow_advantages(steps)
    check_loopback_only(seen)


@pytest.mark.verl_e2e
@pytest.mark.parametrize("method", ["rlsd", "gear"])
def test_verl_main_with_credit_on_cpu(tmp_path, tiny_dir, method):
    rows, seen = run_verl(tmp_path, "verl_main", [
        "algorithm.adv_estimator=grpo", f"+grpolab.credit.name={method}",
        "+grpolab.credit.privileged_key=solution", f"+grpolab.credit.chat_template='{TEACHER}'",
    ], tiny_dir)
    steps = metrics_by_step(rows)
    assert sorted(steps) == [1, 2]
    for s in (1, 2):
        m = steps[s]
        assert 0 < m["credit/scored_rows_frac"] <= 1
        assert {"credit/lam", "credit/delta_mean", "credit/multiplier_min", "timing_s/grpolab_teacher"} <= set(m)
        if method == "gear":
            assert "credit/segments_per_seq" in m
    check_gradients_follow_advantages(steps)
    assert steps[2]["credit/lam"] < steps[1]["credit/lam"]  # the schedule advanced with verl's steps
    check_loopback_only(seen)
