"""Issue 62, item 5: fault injection on a tiny run. Each case kills, fills or signals a real
`grpolab train` process at one point, then resumes it, and asserts that nothing is lost or
duplicated: the final weights are byte for byte those of an uninterrupted run, metrics.jsonl and
completions.jsonl hold the same rows once each, and what the user read was one clear line.

- ``kill -9`` during sampling, the update, a checkpoint write and the warm start;
- a full disk (a small tmpfs; needs root to mount, skipped otherwise): refused up front, and met
  while writing a checkpoint and while writing metrics.jsonl;
- SIGTERM (a batch scheduler), SIGHUP and Ctrl-C: handled alike, with the resume hint and a
  checkpoint of the last completed step (a step being updated or checkpointed is finished first;
  a second signal stops at once), so the resume replays nothing;
- two processes on one run directory.

Every run trains in a process of its own with one torch thread, so that the runs are bit-for-bit
comparable whatever the test process has set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest
import torch

from grpolab.cli import main
from grpolab.train.rundir import LOCK_FILE

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=2", "task.n_train=16", "task.n_eval=4",
    "sft.enabled=yes", "sft.max_steps=4", "sft.save_every=1", "sft.eval_every=2", "sft.batch_size=8",
    "sft.n_eval=4", "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=6",
    "trainer.steps=3", "trainer.save_every=1", "trainer.eval_every=3", "trainer.preflight=false",
    "log.progress=false", "log.plots=false", "log.tensorboard=false", "log.completions_every=1",
    "trainer.skip_zero_advantage=false",
]
VOLATILE = ("time/", "tokens_per_s", "timing_s/", "perf/throughput", "memory/")

# Runs `grpolab train ARGS` with a fault at the n-th call of one point of the trainer:
#   kill: SIGKILL itself (sampling: before step n's sampling; update: after step n's update;
#         checkpoint: before writing step n's state.pt; warm_start: before warm-start step n)
#   fill: fill the run's file system (all but nothing left) before the point runs
#   SIGTERM, SIGHUP, SIGINT (SIGTERMx2: twice): send it to itself at the point
RUNNER = r"""
import os, signal, sys
import torch
torch.set_num_threads(1)
fault, point, n, filler = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
calls = {"n": 0}

def hit():
    calls["n"] += 1
    if calls["n"] != n:
        return
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.startswith("SIG"):  # a stop signal, or two in a row ("SIGTERMx2"): the handlers run next
        name, _, times = fault.partition("x")
        for _ in range(int(times or 1)):
            os.kill(os.getpid(), getattr(signal, name))
        return
    with open(filler, "wb") as f:  # the disk fills up: everything up to the last byte
        try:
            while True:
                f.write(b"\0" * (1 << 16))
                f.flush()
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0")
                f.flush()
        except OSError:
            pass

from grpolab.train import loop, metrics_log, sft
if point == "sampling":
    real_collect = loop.collect_step
    loop.collect_step = lambda *a, **k: (hit(), real_collect(*a, **k))[1]
elif point == "update":
    real_update = loop.update
    loop.update = lambda *a, **k: (real_update(*a, **k), hit())[0]
elif point == "checkpoint":
    real_save = torch.save
    def save(obj, path, *a, **k):
        if "checkpoints" in str(path) and "sft" not in str(path) and str(path).endswith("state.pt"):  # not the warm start's
            hit()
        return real_save(obj, path, *a, **k)
    torch.save = save
elif point == "warm_start":
    real_batch = sft.sft_batch
    sft.sft_batch = lambda *a, **k: (hit(), real_batch(*a, **k))[1]
elif point == "metrics":
    real_log = metrics_log.MetricsLog.log
    metrics_log.MetricsLog.log = lambda self, *a, **k: (hit(), real_log(self, *a, **k))[1]
from grpolab.cli import main
sys.exit(main(sys.argv[5:]))
"""


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}


def _argv(run, *extra):
    return ["train", *sum([["--set", s] for s in [*SMALL, f"trainer.run_dir={run}", *extra]], [])]


def _grpolab(argv, *, fault="none", point="none", n=0, filler="", timeout=1200):
    return subprocess.run([sys.executable, "-c", RUNNER, fault, point, str(n), filler, *argv], env=_env(),
                          capture_output=True, text=True, timeout=timeout)


@contextmanager
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _main(argv, capsys):
    """``grpolab ARGV`` in this process (for the commands that refuse before any training): one
    torch thread. Returns ``(rc, stdout, stderr lines)``."""
    capsys.readouterr()
    with _one_thread():
        rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, [line for line in out.err.splitlines() if line.strip()]


def _resume(run, capsys):
    """``grpolab train --resume RUN`` in a fresh process, as the baseline ran: this process's state
    (what other tests set: torch flags, registries) plays no part in the comparison."""
    done = _grpolab(["train", "--resume", str(run)])
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _stable(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]


def _completions(run):
    return [json.loads(line) for line in (run / "completions.jsonl").read_text().splitlines()]


def _assert_same_run(run, base):
    """Nothing lost, nothing duplicated: the same weights, metrics rows and completions as ``base``."""
    assert (run / "final" / "model.safetensors").read_bytes() == (base / "final" / "model.safetensors").read_bytes()
    assert [r["step"] for r in _stable(run)] == [1, 2, 3]
    assert _stable(run) == _stable(base)
    assert _completions(run) == _completions(base)
    assert not list((run / "checkpoints").glob(".tmp-*"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    run = tmp_path_factory.mktemp("faults") / "base"
    done = _grpolab(_argv(run))  # a process of its own, like every run it is compared with
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [r["step"] for r in _completions(run)]
    assert sorted(set(steps)) == [1, 2, 3]
    return run


@pytest.mark.parametrize("point,n", [("warm_start", 3), ("sampling", 2), ("update", 3), ("checkpoint", 2)])
def test_kill_9_then_resume_equals_the_uninterrupted_run(baseline, tmp_path, capsys, point, n):
    run = tmp_path / "run"
    killed = _grpolab(_argv(run), fault="kill", point=point, n=n)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (run / "final").exists()
    out = _resume(run, capsys)
    if point != "warm_start" and point != "sampling":
        assert f"resumed {run} at step " in out
    _assert_same_run(run, baseline)


def test_sigterm_stops_like_ctrl_c_with_the_resume_hint(baseline, tmp_path, capsys):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, "none", "none", "0", "", *_argv(run, "trainer.steps=3")],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 900
    while not (run / "checkpoints" / "latest").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=600)
    if proc.returncode == 0:
        pytest.skip("the run finished before SIGTERM arrived (a very fast machine)")
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    # landing in a step's update, logging or checkpoint write, the signal lets the step finish (one line says so)
    assert len(lines) <= 2 and all(line.startswith("SIGTERM: finishing step ") for line in lines[:-1]), lines
    assert lines[-1].startswith(f"stopped by SIGTERM; resume with `grpolab train --resume {run}`")
    assert "continues from its last checkpoint, step " in lines[-1]
    _resume(run, capsys)
    _assert_same_run(run, baseline)


# (fault, point, n, settings, the checkpoint the resume starts from, whether the step in progress is finished,
# the steps metrics.jsonl holds at the stop).
# With trainer.save_every=3 no checkpoint falls due before the last step: the one a resume finds was written
# at the signal.
SIGNAL_CASES = [
    # during step 2's sampling (no weight has changed): step 2 is abandoned, step 1's checkpoint written
    ("SIGTERM", "sampling", 2, "trainer.save_every=3", 1, False, [1]),
    # during step 2's update: the step is finished, logged and checkpointed, then the run stops
    ("SIGHUP", "update", 2, "trainer.save_every=3", 2, True, [1, 2]),
    # during step 2's checkpoint write (Ctrl-C): the write is finished, then the run stops
    ("SIGINT", "checkpoint", 2, "trainer.save_every=1", 2, True, [1, 2]),
    # a second signal stops at once: step 2's write is cut short (its folder removed), step 1's stands
    ("SIGTERMx2", "checkpoint", 2, "trainer.save_every=1", 1, True, [1, 2]),
    # ... and during an update: nothing is written, the resume replays from the start, exactly
    ("SIGTERMx2", "update", 2, "trainer.save_every=3", 0, True, [1]),
]


@pytest.mark.parametrize("fault,point,n,setting,kept,finishing,logged", SIGNAL_CASES)
def test_a_signal_keeps_the_last_completed_step(baseline, tmp_path, capsys, fault, point, n, setting, kept,
                                                 finishing, logged):
    run = tmp_path / "run"
    stopped = _grpolab(_argv(run, setting), fault=fault, point=point, n=n)
    name = fault.partition("x")[0]
    lines = [line for line in stopped.stderr.splitlines() if line.strip()]
    assert stopped.returncode == 128 + getattr(signal, name), stopped.stderr[-3000:]
    said = "interrupted" if name == "SIGINT" else f"stopped by {name}"
    where = f" (continues from its last checkpoint, step {kept})" if kept else ""
    assert lines == [f"{name}: finishing step {n} and writing its checkpoint, then stopping; a second signal stops "
                     "at once"] * finishing + [f"{said}; resume with `grpolab train --resume {run}`{where}"]
    assert not list((run / "checkpoints").glob(".tmp-*"))  # a write cut short leaves nothing behind
    assert [r["step"] for r in _stable(run)] == logged  # the finished step's row is written once, before it stops
    out = _resume(run, capsys)
    assert (f"resumed {run} at step {kept}" if kept else f"no checkpoint in {run}; starting from step 0") in out
    _assert_same_run(run, baseline)


def test_two_processes_on_one_run_dir(baseline, tmp_path, capsys):
    run = tmp_path / "run"
    # the first trainer is held at its second sampling round (a slow step), so the second meets it
    slow = RUNNER.replace('os.kill(os.getpid(), signal.SIGKILL)', 'import time; time.sleep(600)')
    proc = subprocess.Popen([sys.executable, "-c", slow, "kill", "sampling", "2", "", *_argv(run)], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 900
        while not (run / "checkpoints" / "latest").exists() and time.time() < deadline:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            time.sleep(0.05)
        for argv in (["train", "--resume", str(run)], _argv(run, "trainer.seed=1")):
            rc, _out, lines = _main(argv, capsys)
            assert rc == 2 and len(lines) == 1, lines
            assert "in use by another grpolab process" in lines[0] and f"(pid {proc.pid})" in lines[0]
    finally:
        proc.kill()
        proc.communicate()
    assert (run / LOCK_FILE).read_text().strip() == str(proc.pid)  # a stale pid; the kernel freed the lock
    _resume(run, capsys)
    _assert_same_run(run, baseline)


@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs, unmounted afterwards (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root; the full-disk cases run as root (CI)")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"this machine does not allow mounting a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("dry", [False, True])
def test_full_disk_is_refused_up_front(small_disk, capsys, dry):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (44 << 20))  # 4 MiB left: less than the run's checkpoints need
    run = small_disk / "run"
    rc, _out, lines = _main(["train", *(["--dry-run"] if dry else []), *_argv(run)[1:]], capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: not enough disk space at {run}: ") and "MiB free" in lines[0]
    assert not run.exists()  # refused before anything was written


@pytest.mark.parametrize("point,n", [("checkpoint", 2), ("metrics", 2)])
def test_full_disk_mid_run_is_named_and_resume_is_exact(baseline, small_disk, capsys, point, n):
    run = small_disk / "run"
    filler = small_disk / "filler"
    out = _grpolab(_argv(run), fault="fill", point=point, n=n, filler=str(filler))
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2 and len(lines) == 1, out.stderr[-3000:]
    assert lines[0].startswith("error: disk full at "), lines[0]
    assert "the last complete checkpoint is step 1" in lines[0] and f"grpolab train --resume {run}" in lines[0]
    filler.unlink()  # the user frees space and resumes
    _resume(run, capsys)
    _assert_same_run(run, baseline)
    shutil.rmtree(run)


def _sft_argv(out):
    return ["sft", "--out", str(out), *sum([["--set", s] for s in SMALL], [])]


@pytest.fixture(scope="module")
def sft_baseline(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults_sft") / "ws"
    done = _grpolab(_sft_argv(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_sft_full_disk_is_refused_up_front(small_disk, capsys):
    (small_disk / "filler").write_bytes(b"\0" * (44 << 20))  # 4 MiB left: less than the warm start writes
    out = small_disk / "ws"
    rc, _out, lines = _main(_sft_argv(out), capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: not enough disk space at {out}: ") and "MiB free" in lines[0]
    assert "the warm start takes about " in lines[0] and lines[0].endswith("pick another --out")
    assert not out.exists() and not (small_disk / "ws.partial").exists()  # refused before anything was written


def test_sft_full_disk_mid_warm_start_is_named_and_the_rerun_is_exact(sft_baseline, small_disk, capsys):
    out, filler = small_disk / "ws", small_disk / "filler"
    # the disk fills before warm-start step 3: its checkpoint write fails, step 2's stands
    full = _grpolab(_sft_argv(out), fault="fill", point="warm_start", n=3, filler=str(filler))
    lines = [line for line in full.stderr.splitlines() if line.strip()]
    assert full.returncode == 2 and len(lines) == 1, full.stderr[-3000:]
    assert lines[0].startswith(f"error: disk full at {small_disk}"), lines[0]
    assert "the last complete checkpoint is step 2" in lines[0]
    assert lines[0].endswith("Free space and run the same `grpolab sft` command again (it goes on from there)")
    filler.unlink()
    again = _grpolab(_sft_argv(out))
    assert again.returncode == 0, again.stderr[-3000:]
    assert (out / "model.safetensors").read_bytes() == (sft_baseline / "model.safetensors").read_bytes()
    shutil.rmtree(out)
