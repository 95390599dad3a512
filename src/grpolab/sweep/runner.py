"""Run a grid of training runs, several at once, resumably.

Layout of a sweep directory ``OUT``::

    OUT/sweep.json            the plan: base config, overrides, factors (or design file), seeds, run names
    OUT/runs/NAME/            one grpolab run directory per grid point x seed
    OUT/runs/NAME/result.json written last by the run's process: present = finished
    OUT/runs/NAME/train.log   the run's stdout/stderr

The runs are a Cartesian grid x seeds, or the rows of a design file (``--design``, e.g. an
orthogonal array). Each run is a subprocess (``python -m grpolab.sweep.worker``) so J of them use J cores; each gets
``torch`` threads = cores // J. Re-running the same command skips finished runs and resumes
interrupted ones from their last checkpoint (``train(cfg, resume=True)``), so a killed sweep loses
at most ``trainer.save_every`` steps per run. A run that fails is reported (its log tail) and the
others go on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml

from grpolab.sweep.grid import RunSpec, design_factors, expand_grid, load_design, parse_factor
from grpolab.utils.io import atomic_write_json, atomic_write_text
from grpolab.utils.proc import pid_alive

__all__ = ["SweepRun", "available_cores", "plan_sweep", "run_sweep"]


LOCK_FILE = ".worker.pid"  # written by a run's process while it trains


def _running_elsewhere(run_dir: Path) -> bool:
    """Whether a live process (per ``RUN_DIR/.worker.pid``) is training this run right now."""
    try:
        pid = int((run_dir / LOCK_FILE).read_text().strip())
    except (OSError, ValueError):
        return False
    return pid_alive(pid)


def _raise_on_sigterm():
    """Turn SIGTERM into KeyboardInterrupt (so children are stopped); returns the old handler."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    return signal.signal(signal.SIGTERM, handler)


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@dataclass
class SweepRun:
    out: Path
    specs: list[RunSpec]
    status: dict[str, str] = field(default_factory=dict)  # name -> done | skipped | failed
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0  # user+sys time of the run processes
    jobs: int = 1
    threads: int = 1
    cores: int = 1

    @property
    def utilisation(self) -> float:
        """Busy fraction of the machine's cores over the sweep: cpu_seconds / (wall x cores)."""
        return self.cpu_seconds / max(self.wall_seconds * self.cores, 1e-9)

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out / "runs" / spec.name


#: Config keys that do not change a run's result, only where and how often it is saved or shown.
_NO_EFFECT = {("trainer", "run_dir"), ("trainer", "save_every"), ("sft", "save_every"), ("sft", "snapshot_every"),
              ("log", "progress")}


def _config_differences(old: dict, new: dict) -> list[str]:
    """Keys whose values differ between a run's saved config and the planned one.

    Keys that cannot change what a run computes are ignored (:data:`_NO_EFFECT`: where it is
    written, how often it checkpoints, whether a progress bar is drawn; resume is exact), and so
    are keys present in only one of them (a field added to grpolab after the run started takes
    its default, which keeps the old behaviour), and the whole
    ``sft`` section when neither config runs a warm start (``model.path`` set with ``sft.enabled``
    auto, or ``sft.enabled: no``): a changed default there cannot change the run.
    """
    old, new = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    diffs = []
    skip = {"sft"} if not (_runs_warm_start(old) or _runs_warm_start(new)) else set()
    for section in (set(old) & set(new)) - skip:
        a, b = old[section], new[section]
        if not isinstance(a, dict) or not isinstance(b, dict):
            if a != b:
                diffs.append(section)
            continue
        for k in set(a) & set(b):
            if (section, k) not in _NO_EFFECT and a[k] != b[k]:
                diffs.append(f"{section}.{k}: {a[k]!r} -> {b[k]!r}")
    return sorted(diffs)


def _runs_warm_start(cfg: dict) -> bool:
    """Whether a (saved, plain-dict) config runs the supervised warm start."""
    enabled = (cfg.get("sft") or {}).get("enabled", "auto")
    enabled = {True: "yes", False: "no"}.get(enabled, enabled) if isinstance(enabled, bool) else str(enabled)
    from_scratch = not (cfg.get("model") or {}).get("path")
    return enabled == "yes" or (enabled == "auto" and from_scratch)


def plan_sweep(config: str | Path | None, overrides: list[str], grid: list[str], seeds: int | list[int],
               out: str | Path, design: str | Path | None = None) -> tuple[Path, list[RunSpec]]:
    """Validate every run's config before any work and write ``OUT/sweep.json`` + each ``config.yaml``.

    The runs are the Cartesian ``grid`` x ``seeds``, or the rows of a ``design`` file
    (:func:`grpolab.sweep.grid.load_design`; then ``grid`` must be empty).

    Raises ConfigError (bad key/value in any grid point) or ValueError (a run directory that holds
    a run of a *different* config: pick another ``out`` or delete it).
    """
    from grpolab.config import load_config
    from grpolab.train.checkpoint import latest_checkpoint

    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if design is not None:
        if grid:
            raise ValueError("give either --design FILE or --grid factors, not both")
        specs = load_design(design, seed_list)
        factors = design_factors(specs)
    else:
        factors = [parse_factor(g) for g in grid]
        specs = expand_grid(factors, seed_list)
    out = Path(out)
    configs = {}
    for spec in specs:
        cfg = load_config(config, list(overrides) + spec.overrides() + [
            f"trainer.run_dir={out / 'runs' / spec.name}", "log.progress=false"])
        configs[spec.name] = cfg
    for spec in specs:
        run_dir = out / "runs" / spec.name
        new = configs[spec.name].to_dict()
        old_path = run_dir / "config.yaml"
        if old_path.exists():
            old = yaml.safe_load(old_path.read_text()) or {}
            started = (run_dir / "result.json").exists() or latest_checkpoint(run_dir) is not None
            diffs = _config_differences(old, new) if started else []
            if diffs:
                raise ValueError(
                    f"{run_dir} holds a run with a different config ({'; '.join(diffs[:3])}); use another "
                    f"--out directory, or delete {run_dir} to rerun it with the new config")
        if not (run_dir / "result.json").exists():
            atomic_write_text(old_path, yaml.safe_dump(new, sort_keys=False))
    atomic_write_json(out / "sweep.json", {
        "config": str(config) if config else None, "overrides": list(overrides), "grid": list(grid),
        "design": str(design) if design is not None else None,
        "factors": [{"key": k, "values": v} for k, v in factors], "seeds": sorted({s.seed for s in specs}),
        "runs": [{"name": s.name, "setting": s.setting, "factors": s.factors, "seed": s.seed} for s in specs],
    })
    return out, specs


def load_specs(out: str | Path) -> tuple[dict, list[RunSpec]]:
    """The plan of an existing sweep directory."""
    plan = json.loads((Path(out) / "sweep.json").read_text())
    return plan, [RunSpec(name=r["name"], setting=r["setting"], factors=r["factors"], seed=r["seed"])
                  for r in plan["runs"]]


def run_sweep(out: str | Path, specs: list[RunSpec], *, jobs: int = 1,
              log: Callable[[str], None] = print, poll: float = 0.5) -> SweepRun:
    """Run every unfinished spec (already planned by :func:`plan_sweep`), ``jobs`` at a time."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    out = Path(out)
    cores = available_cores()
    threads = max(1, cores // jobs)
    sweep = SweepRun(out=out, specs=specs, jobs=jobs, threads=threads, cores=cores)
    todo = []
    for spec in specs:
        if (sweep.run_dir(spec) / "result.json").exists():
            sweep.status[spec.name] = "skipped"
        elif _running_elsewhere(sweep.run_dir(spec)):
            sweep.status[spec.name] = "running elsewhere"
            log(f"  {spec.name}: another process is training it (pid in {LOCK_FILE}); not starting it again")
        else:
            todo.append(spec)
    log(f"sweep {out}: {len(specs)} runs, {len(specs) - len(todo)} already finished, {len(todo)} to run, "
        f"{jobs} at a time x {threads} torch threads ({cores} cores)")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false"}
    running: dict[str, tuple[subprocess.Popen, RunSpec, float, object]] = {}
    t0 = time.time()
    cpu0 = os.times()
    previous = _raise_on_sigterm()
    try:
        while todo or running:
            while todo and len(running) < jobs:
                spec = todo.pop(0)
                run_dir = sweep.run_dir(spec)
                fh = open(run_dir / "train.log", "a", encoding="utf-8")
                proc = subprocess.Popen([sys.executable, "-m", "grpolab.sweep.worker", str(run_dir), str(threads)],
                                        stdout=fh, stderr=subprocess.STDOUT, env=env)
                running[spec.name] = (proc, spec, time.time(), fh)
                log(f"  start {spec.name}")
            time.sleep(poll)
            for name, (proc, spec, started, fh) in list(running.items()):
                rc = proc.poll()
                if rc is None:
                    continue
                fh.close()
                del running[name]
                ok = rc == 0 and (sweep.run_dir(spec) / "result.json").exists()
                sweep.status[name] = "done" if ok else "failed"
                msg = f"  {'done  ' if ok else 'FAILED'} {name} in {time.time() - started:.0f}s"
                if not ok:
                    tail = (sweep.run_dir(spec) / "train.log").read_text(errors="replace").splitlines()[-5:]
                    msg += f" (exit {rc}); log tail:\n    " + "\n    ".join(tail)
                log(msg)
    except BaseException:
        for proc, *_ in running.values():  # our own children only
            proc.terminate()
        for proc, *_ in running.values():
            proc.wait()
        log("sweep interrupted; run the same command again to resume (finished runs are kept)")
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    cpu1 = os.times()
    sweep.wall_seconds = time.time() - t0
    sweep.cpu_seconds = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
    return sweep
