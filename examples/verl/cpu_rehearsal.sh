#!/usr/bin/env bash
# verl's real trainer on CPU (docs/scale-out.md, "verl on CPU"): the recipe of
# run_qwen2.5_math_1.5b.sh / run_rlsd_qwen2.5_math_1.5b.sh rehearsed on a 31 K-parameter tiny model
# and grpolab's arith task, 2 steps each: CTPO + BA through verl's main_ppo, then RLSD through
# grpolab.integrations.verl.main. Needs `pip install -c constraints-cpu.txt 'grpolab[verl]'`; about
# 1.5-2 min per run on 2 cores (mostly Ray's start-up). Extra Hydra overrides go to both runs.
set -euo pipefail
work=${WORK:-$(mktemp -d)}
python - "$work" <<'PY'
import sys
from grpolab.integrations.verl.cpu import toy
w = sys.argv[1]
toy.write_tiny_model(f"{w}/model")
toy.write_arith_parquet(f"{w}/train.parquet", toy.arith_items("train", 64))
toy.write_arith_parquet(f"{w}/val.parquet", toy.arith_items("eval", 16), split="eval")
PY
toy=$(python -c 'import grpolab.integrations.verl.cpu.toy as t; print(t.__file__)')
common=(
  data.train_files="$work/train.parquet" data.val_files="$work/val.parquet"
  data.train_batch_size=4 data.max_prompt_length=16 data.max_response_length=24
  actor_rollout_ref.model.path="$work/model" actor_rollout_ref.rollout.n=4
  actor_rollout_ref.actor.ppo_mini_batch_size=4 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.actor.optim.lr=1e-3 actor_rollout_ref.actor.use_kl_loss=false
  reward.custom_reward_function.path="$toy" reward.custom_reward_function.name=compute_partial_score
  trainer.total_training_steps=2 "trainer.logger=[console]" trainer.val_before_train=false
  trainer.test_freq=-1 trainer.save_freq=-1 trainer.default_local_dir="$work/ckpt"
)
python -m grpolab.integrations.verl.cpu main_ppo "${common[@]}" \
  actor_rollout_ref.actor.policy_loss.loss_mode=ctpo algorithm.adv_estimator=grpolab_balanced \
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum "$@"
python -m grpolab.integrations.verl.cpu verl_main "${common[@]}" algorithm.adv_estimator=grpo \
  +grpolab.credit.name=rlsd +grpolab.credit.privileged_key=solution \
  "+grpolab.credit.chat_template='{prompt} here is a reference solution: {privileged} solve it. {prompt}'" "$@"
