"""``grpolab diagnose RUN_DIR``: drift, revert/transplant ablations and effective rank of a run's
model (the library: :mod:`grpolab.diagnose`)."""

from __future__ import annotations

import argparse

from grpolab.commands.base import POSITIVE_INT, Command

__all__ = ["DIAGNOSE", "diagnose_command"]


def diagnose_command(run_dir: str, *, base: str | None = None, n: int = 256, probe: int = 64, seed: int = 0) -> int:
    """Drift, revert/transplant ablations and effective rank of a run's model (``diagnose.md``)."""
    from grpolab.diagnose import diagnose_run

    report = diagnose_run(run_dir, base=base, n=n, probe=probe, seed=seed)
    print(f"report: {report}")
    return 0


def _arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("run_dir", help="a grpolab run directory (with final/ or checkpoints/)")
    d.add_argument("--base", default=None, help="the starting model (default: RUN_DIR/sft, else model.path)")
    d.add_argument("--n", type=POSITIVE_INT, default=256, help="held-out items for the ablations")
    d.add_argument("--probe", type=POSITIVE_INT, default=64, help="held-out prompts for hidden-state ranks")
    d.add_argument("--seed", type=int, default=0)


DIAGNOSE = Command("diagnose", "what changed in a trained run: drift, revert/transplant, effective rank", _arguments,
                   lambda args: diagnose_command(args.run_dir, base=args.base, n=args.n, probe=args.probe,
                                                 seed=args.seed))
