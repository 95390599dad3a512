"""grpolab.diagnostics: when does GRPO help? Pure functions plus small report writers.

* statistics -- :func:`pass_at_k` (unbiased), :func:`bootstrap_ci` (items only), :func:`mcnemar_exact`
* inference -- comparisons of runs (:mod:`grpolab.diagnostics.inference`, docs/statistics.md):
  :func:`paired_seed_test` (t interval + exact sign-flip test, TOST, MDE), :func:`compare_family`
  (Holm), :func:`mcnemar_items`, :func:`shared_items_test`, :func:`mean_interval`,
  :func:`bootstrap_interval` (>= 20 units)
* preflight -- :mod:`grpolab.diagnostics.preflight` (headroom, why responses fail, one verdict per method,
  the pilot's rules); :func:`family_of` labels an item's task family
* parameters -- :func:`parameter_drift` per group/layer, :func:`swap_in` / :func:`swapped` for
  revert / transplant ablations, :func:`parameter_state`
* rank -- :func:`effective_rank` (Roy & Vetterli), :func:`hidden_state_effective_ranks`
* collapse -- :func:`detect_collapse` on success and entropy curves
* readability -- can the privileged teacher read? :func:`first_wrong_token`, :func:`localisation`
  (first-wrong-token AUC), :func:`readability` (with the response AUC); the teacher forward is
  :func:`grpolab.measure.readability.measure_readability`
* :func:`wilson_interval` -- the item-sampling interval of one accuracy

Nothing here imports the trainer; the model runs live in :mod:`grpolab.measure` (the preflight's
sampling in :mod:`grpolab.measure.preflight`) and the revert/transplant study in :mod:`grpolab.diagnose`.
"""

from grpolab.diagnostics.collapse import CollapseVerdict, detect_collapse
from grpolab.diagnostics.preflight.stats import family_of
from grpolab.diagnostics.params import GroupDrift, parameter_drift, parameter_state, swap_in, swapped
from grpolab.diagnostics.rank import effective_rank, hidden_state_effective_ranks
from grpolab.diagnostics.readability import READABLE_AUC, first_wrong_token, localisation, readability
from grpolab.diagnostics.inference import (
    ItemComparison,
    PairedComparison,
    SharedItemsComparison,
    Verdict,
    bootstrap_interval,
    compare_family,
    holm,
    mcnemar_items,
    mde_paired,
    mean_interval,
    paired_seed_test,
    shared_items_test,
)
from grpolab.diagnostics.stats import CI, bootstrap_ci, mcnemar_exact, pass_at_k, wilson_interval

__all__ = [
    "CI",
    "READABLE_AUC",
    "CollapseVerdict",
    "GroupDrift",
    "ItemComparison",
    "PairedComparison",
    "SharedItemsComparison",
    "Verdict",
    "bootstrap_ci",
    "bootstrap_interval",
    "compare_family",
    "holm",
    "mcnemar_items",
    "shared_items_test",
    "mcnemar_exact",
    "detect_collapse",
    "effective_rank",
    "family_of",
    "first_wrong_token",
    "hidden_state_effective_ranks",
    "localisation",
    "mean_interval",
    "mde_paired",
    "paired_seed_test",
    "parameter_drift",
    "parameter_state",
    "pass_at_k",
    "readability",
    "swap_in",
    "swapped",
    "wilson_interval",
]
