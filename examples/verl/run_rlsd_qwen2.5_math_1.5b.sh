#!/usr/bin/env bash
# RLSD (or GEAR) on MATH with Qwen2.5-Math-1.5B in verl: the GRPO example's config
# (grpolab_qwen2.5_math_1.5b.yaml: CTPO + Balanced Aggregation) plus grpolab's credit extension,
# launched through grpolab.integrations.verl.main. Each step the reference worker (the frozen
# initial policy) scores the sampled responses under a privileged prompt showing MATH's worked
# solution (extra_info.solution, written by prepare_math.py), and RLSD reweights every token's
# advantage. Needs a GPU node (8 GPUs by default) with `pip install 'grpolab[verl]' vllm`.
#
#   python examples/verl/prepare_math.py --out ~/data/math        # once: MATH -> verl parquet
#   bash examples/verl/run_rlsd_qwen2.5_math_1.5b.sh               # CTPO + BA + RLSD
#   CREDIT=gear bash examples/verl/run_rlsd_qwen2.5_math_1.5b.sh   # GEAR (sampled-token divergence)
#   bash examples/verl/run_rlsd_qwen2.5_math_1.5b.sh +grpolab.credit.teacher=live   # live teacher
#
# Extra Hydra overrides are passed through (see docs/scale-out.md for every grpolab.credit key).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CREDIT="${CREDIT:-rlsd}"    # rlsd | gear
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-grpolab.integrations.verl.plugin}"
exec python3 -m grpolab.integrations.verl.main \
  --config-path="$HERE" --config-name=grpolab_qwen2.5_math_1.5b \
  +grpolab.credit.name="$CREDIT" \
  +grpolab.credit.privileged_key=solution \
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8 \
  trainer.experiment_name="qwen2.5-math-1.5b-ctpo-ba-${CREDIT}" \
  "$@"
