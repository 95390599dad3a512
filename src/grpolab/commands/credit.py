"""``grpolab credit RUN_DIR --sample N``: the token-credit page of a run (the library:
:mod:`grpolab.credit_page`)."""

from __future__ import annotations

from grpolab.credit_page import credit_page

__all__ = ["credit_command"]


def credit_command(run_dir: str, *, sample: int = 6, lam: float | None = None, method: str | None = None, seed: int = 0,
                   out: str | None = None, png: bool = True) -> int:
    """``grpolab credit``: the token-credit page of a run (``credit.html``, and ``credit.png`` unless
    ``png`` is False)."""
    page = credit_page(run_dir, sample=sample, lam=lam, method=method, seed=seed, out_dir=out, png=png)
    print(f"wrote {page}" + (f" and {page.with_suffix('.png')}" if png else ""))
    return 0
