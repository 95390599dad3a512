"""``grpolab credit RUN_DIR --sample N``: the token-credit page of a run (the library:
:mod:`grpolab.credit_page`)."""

from __future__ import annotations

import argparse

from grpolab.commands.base import POSITIVE_INT, UNIT, Command

__all__ = ["CREDIT", "credit_command"]


def credit_command(run_dir: str, *, sample: int = 6, lam: float | None = None, method: str | None = None, seed: int = 0,
                   out: str | None = None, png: bool = True) -> int:
    """``grpolab credit``: the token-credit page of a run (``credit.html``, and ``credit.png`` unless
    ``png`` is False)."""
    from grpolab.credit_page import credit_page

    page = credit_page(run_dir, sample=sample, lam=lam, method=method, seed=seed, out_dir=out, png=png)
    print(f"wrote {page}" + (f" and {page.with_suffix('.png')}" if png else ""))
    return 0


def _arguments(cr: argparse.ArgumentParser) -> None:
    cr.add_argument("run_dir", help="a grpolab run directory")
    cr.add_argument("--sample", type=POSITIVE_INT, default=6, help="responses to show")
    cr.add_argument("--method", default=None, choices=["rlsd", "gear", "opsd"],
                    help="credit method (default: the run's, or gear for a grpo run)")
    cr.add_argument("--lam", type=UNIT, default=None,
                    help="mixing weight shown (default: the value training reached; 1 = the full teacher weight)")
    cr.add_argument("--seed", type=int, default=0)
    cr.add_argument("--out", default=None, help="output folder (default: RUN_DIR/credit)")
    cr.add_argument("--no-png", action="store_true", help="HTML only")


def _run(args: argparse.Namespace) -> int:
    return credit_command(args.run_dir, sample=args.sample, lam=args.lam, method=args.method, seed=args.seed,
                          out=args.out, png=not args.no_png)


CREDIT = Command("credit", "HTML/PNG page: each response token coloured by its teacher credit multiplier", _arguments,
                 _run)
