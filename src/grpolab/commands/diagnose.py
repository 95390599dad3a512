"""``grpolab diagnose RUN_DIR``: drift, revert/transplant ablations and effective rank of a run's
model (the library: :mod:`grpolab.diagnose`)."""

from __future__ import annotations

from grpolab.diagnose import diagnose_run

__all__ = ["diagnose_command"]


def diagnose_command(run_dir: str, *, base: str | None = None, n: int = 256, probe: int = 64, seed: int = 0) -> int:
    """Drift, revert/transplant ablations and effective rank of a run's model (``diagnose.md``)."""
    report = diagnose_run(run_dir, base=base, n=n, probe=probe, seed=seed)
    print(f"report: {report}")
    return 0
