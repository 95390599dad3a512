"""The step row's names moved to :mod:`grpolab.step_row` (the one table of every step-row key,
importable from ``objectives/``, whose credit row uses it); this module re-exports what it held
(``VERL_NAMES``, ``VERL_SUMS``, ``fill_row``, ``with_verl_names``) for one release."""

from __future__ import annotations

from grpolab.step_row import VERL_NAMES, VERL_SUMS, fill_row, with_verl_names

__all__ = ["VERL_NAMES", "VERL_SUMS", "fill_row", "with_verl_names"]
