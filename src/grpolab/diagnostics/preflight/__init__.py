"""Before a run: which method can help here? The preflight's pure part (docs/when-grpo-helps.md).

The measuring part (:mod:`grpolab.measure.preflight`) samples the starting model through the run's
collector and hands this package per-item, per-response outcomes; nothing here calls a model.

* :mod:`~grpolab.diagnostics.preflight.stats` -- outcomes to :class:`PreflightStats` (headroom:
  greedy vs sampled with one paired interval, pass@k, reachable; why responses fail; signal at the
  group size; length coupling; the most common answer's share);
* :mod:`~grpolab.diagnostics.preflight.verdicts` -- the registry of method rules keyed by id
  (:data:`VERDICTS`, :func:`register_verdict`; a new method is one registered function), each
  returning a :class:`MethodVerdict` with a :class:`Verdict`;
* :mod:`~grpolab.diagnostics.preflight.result` -- :class:`PreflightResult` (``preflight.json``, read
  back by :meth:`PreflightResult.from_dict`) and :func:`preflight_from_outcomes`;
* :mod:`~grpolab.diagnostics.preflight.records` -- the typed parts of the result beside the statistics:
  a family's row (:class:`FamilyRow`) and the pilot's record (:class:`Pilot`);
* :mod:`~grpolab.diagnostics.preflight.pilot` -- the pilot's rules (the paired change after a few
  GRPO steps; a pilot that never updated decides nothing; a gain from a constant answer is flagged);
* :mod:`~grpolab.diagnostics.preflight.report` -- ``preflight.md``.
"""

from grpolab.diagnostics.preflight.pilot import (
    PILOT_MIN_GAIN,
    apply_pilot,
    change_verdict,
    degenerate_gain,
    items_to_decide,
    pilot_from_outcomes,
    pilot_rule,
    pilot_training,
    pilot_verdict,
)
from grpolab.diagnostics.preflight.report import preflight_markdown
from grpolab.diagnostics.preflight.records import (
    DegenerateGain,
    FamilyRow,
    PairedChange,
    Pilot,
    PilotFamily,
    PilotTraining,
)
from grpolab.diagnostics.preflight.result import PreflightResult, preflight_from_outcomes
from grpolab.diagnostics.preflight.stats import (
    CUT,
    ERROR,
    FAILURE_REASONS,
    UNPARSED,
    WRONG,
    HeadroomStats,
    LengthCoupling,
    PreflightStats,
    ResponseStats,
    all_equal_share,
    answer_in_text,
    auc_interval,
    failure_reason,
    family_of,
    length_coupling,
    modal_answer_share,
    wilson,
)
from grpolab.diagnostics.preflight.verdicts import (
    CANT_TELL,
    INDICATED,
    MIN_ITEMS,
    NOT_INDICATED,
    THRESHOLDS,
    VERDICTS,
    ZERO_SUCCESS_ITEMS,
    MethodVerdict,
    Verdict,
    method_table,
    register_verdict,
    verdicts_from_counts,
)

__all__ = [
    "CANT_TELL", "CUT", "ERROR", "FAILURE_REASONS", "INDICATED", "MIN_ITEMS", "NOT_INDICATED", "PILOT_MIN_GAIN",
    "THRESHOLDS", "UNPARSED", "VERDICTS", "WRONG", "ZERO_SUCCESS_ITEMS", "DegenerateGain", "FamilyRow", "HeadroomStats",
    "LengthCoupling", "MethodVerdict", "PairedChange", "Pilot", "PilotFamily", "PilotTraining", "PreflightResult",
    "PreflightStats", "ResponseStats", "Verdict", "all_equal_share", "answer_in_text", "apply_pilot", "auc_interval",
    "change_verdict", "degenerate_gain", "failure_reason", "family_of", "items_to_decide", "length_coupling",
    "method_table", "modal_answer_share", "pilot_from_outcomes", "pilot_rule", "pilot_training", "pilot_verdict",
    "preflight_from_outcomes", "preflight_markdown", "register_verdict", "verdicts_from_counts", "wilson",
]
