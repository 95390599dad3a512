"""One sweep run in its own process: ``python -m grpolab.sweep.worker RUN_DIR [THREADS]``.

Reads ``RUN_DIR/config.yaml`` (written by the sweep runner), resumes from the run's last
checkpoint when there is one, trains, and writes ``RUN_DIR/result.json`` last -- its presence marks
the run finished. It holds the held-out greedy success before RL and at the end, overall and per
task family (``start_families`` / ``final_families``: ``{family: {accuracy, solved, n}}``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    run_dir = Path(argv[0])
    threads = int(argv[1]) if len(argv) > 1 else 0
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:
            pass
    from grpolab.train import load_run_config, train
    from grpolab.train.checkpoint import latest_checkpoint
    from grpolab.utils.io import atomic_write_json

    from grpolab.sweep.runner import LOCK_FILE
    from grpolab.utils.io import atomic_write_text

    cfg = load_run_config(run_dir)
    cfg.trainer.run_dir = str(run_dir)
    resumed_from = latest_checkpoint(run_dir)
    t0 = time.time()
    lock = run_dir / LOCK_FILE
    atomic_write_text(lock, str(os.getpid()))
    try:
        res = train(cfg, resume=resumed_from is not None, log=lambda m: print(m, flush=True))
    finally:
        lock.unlink(missing_ok=True)
    atomic_write_json(run_dir / "result.json", {
        "steps": res.steps, "start_accuracy": res.start_accuracy, "final_accuracy": res.final_accuracy,
        "best_accuracy": res.best_accuracy, "seconds_this_process": time.time() - t0,
        "start_families": res.start_families, "final_families": res.final_families,
        "resumed_from_step": resumed_from.step if resumed_from else None, "threads": threads,
        "pid": os.getpid(),
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
