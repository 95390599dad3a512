#!/usr/bin/env bash
# GRPO on MATH with Qwen2.5-Math-1.5B in verl, using grpolab's CTPO loss and Balanced Aggregation.
# Needs a GPU node (8 GPUs by default) with `pip install 'grpolab[verl]' vllm` (verl 0.9.x).
#
#   python examples/verl/prepare_math.py --out ~/data/math        # once: MATH -> verl parquet
#   bash examples/verl/run_qwen2.5_math_1.5b.sh                    # CTPO + BA
#   LOSS=grpolab AGG=token bash examples/verl/run_qwen2.5_math_1.5b.sh   # GRPO/DAPO baseline
#
# Extra Hydra overrides are passed through, e.g. `trainer.n_gpus_per_node=4 trainer.logger=[console,wandb]`.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
LOSS="${LOSS:-ctpo}"        # ctpo | grpolab | grpolab_sequence | grpolab_gspo | grpolab_cumulative
AGG="${AGG:-balanced}"      # balanced (grpolab_balanced estimator) | token | sequence
case "$AGG" in
  balanced) ADV=grpolab_balanced; MODE=seq-mean-token-sum ;;
  token)    ADV=grpo;             MODE=token-mean ;;
  sequence) ADV=grpo;             MODE=seq-mean-token-mean ;;
  *) echo "AGG must be balanced, token or sequence (got '$AGG')" >&2; exit 2 ;;
esac
# grpolab registers through verl's "verl.plugins" entry point; naming the module explicitly as well
# makes a broken install fail loudly instead of "Unsupported loss mode".
export VERL_USE_EXTERNAL_MODULES="${VERL_USE_EXTERNAL_MODULES:-grpolab.integrations.verl.plugin}"
python3 -c "import grpolab.integrations.verl.plugin" || { echo "grpolab is not importable here" >&2; exit 1; }
exec python3 -m verl.trainer.main_ppo \
  --config-path="$HERE" --config-name=grpolab_qwen2.5_math_1.5b \
  algorithm.adv_estimator="$ADV" \
  actor_rollout_ref.actor.policy_loss.loss_mode="$LOSS" \
  actor_rollout_ref.actor.loss_agg_mode="$MODE" \
  trainer.experiment_name="qwen2.5-math-1.5b-${LOSS}-${AGG}" \
  "$@"
