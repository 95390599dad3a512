"""``grpolab diagnose`` and ``grpolab credit``: look inside a trained run."""

from __future__ import annotations

from grpolab.config import ConfigError


def diagnose_command(run_dir: str, *, base: str | None = None, n: int = 256, probe: int = 64, seed: int = 0) -> int:
    """Drift, revert/transplant ablations and effective rank of a run's model (``diagnose.md``)."""
    from grpolab.train.diagnose import diagnose_run

    report = diagnose_run(run_dir, base=base, n=n, probe=probe, seed=seed)
    print(f"report: {report}")
    return 0


def credit_command(run_dir: str, *, sample: int = 6, lam: float | None = None, method: str | None = None, seed: int = 0,
                   out: str | None = None, png: bool = True) -> int:
    """The token-credit page of a run (``credit.html``, and ``credit.png`` unless ``png`` is False)."""
    from grpolab.train.credit_viz import credit_page

    if sample < 1:
        raise ConfigError(f"--sample must be >= 1, got {sample}")
    page = credit_page(run_dir, sample=sample, lam=lam, method=method, seed=seed, out_dir=out, png=png)
    print(f"wrote {page}" + (f" and {page.with_suffix('.png')}" if png else ""))
    return 0
