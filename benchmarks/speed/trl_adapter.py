"""Seconds per step: TRL GRPOTrainer (dapo) vs GrpolabGRPOTrainer variants, same tiny model/data/seed.

The overhead of grpolab's TRL adapter (balanced aggregation, cumulative ratio, RLSD teacher forward)
relative to TRL's own token-level loss, on the CPU with a tiny model; only ratios are meaningful.

    python benchmarks/speed/trl_adapter.py [STEPS=6] [ROUNDS=2]
"""
import dataclasses, statistics, sys, tempfile, time
import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch
from datasets import Dataset
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer
from grpolab.integrations.trl.trainer import GrpolabGRPOConfig, GrpolabGRPOTrainer
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

STEPS, ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 6, int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.set_num_threads(1)

def reward(prompts, completions, **kw):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]

class Timer(TrainerCallback):
    def __init__(self): self.t = []; self.b = None
    def on_step_begin(self, *a, **k): self.b = time.perf_counter()
    def on_step_end(self, *a, **k): self.t.append(time.perf_counter() - self.b)

prompts = [f"{a}+{b}=" for a in range(10, 30) for b in range(10, 14)]
ds = Dataset.from_dict({"prompt": prompts, "reference": [str(int(p[:2]) + int(p[3:5])) for p in prompts]})
base = dict(per_device_train_batch_size=32, gradient_accumulation_steps=1, num_generations=8, max_completion_length=32,
            max_steps=STEPS, learning_rate=1e-4, beta=0.0, report_to="none", save_strategy="no", logging_steps=10**6,
            disable_tqdm=True, use_cpu=True, bf16=False, fp16=False, seed=0, dataloader_num_workers=0, loss_type="dapo",
            epsilon=0.2, epsilon_high=0.28)
names = {f.name for f in dataclasses.fields(GRPOConfig)}
base["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
variants = {
    "trl_dapo": (GRPOTrainer, GRPOConfig, {}),
    "grpolab_token": (GrpolabGRPOTrainer, GrpolabGRPOConfig, {}),
    "grpolab_ba_ctpo": (GrpolabGRPOTrainer, GrpolabGRPOConfig, dict(grpolab_aggregation="balanced", grpolab_ratio="cumulative", epsilon=0.025, epsilon_high=0.05)),
    "grpolab_ba_ctpo_rlsd": (GrpolabGRPOTrainer, GrpolabGRPOConfig, dict(grpolab_aggregation="balanced", grpolab_ratio="cumulative", epsilon=0.025, epsilon_high=0.05, grpolab_credit_name="rlsd")),
}
res = {k: [] for k in variants}
for r in range(ROUNDS):
    for name, (T, C, kw) in variants.items():
        tok = build_tokenizer(); model = build_tiny_model(tok, TinyModelConfig(), seed=0)
        with tempfile.TemporaryDirectory() as d:
            timer = Timer()
            tr = T(model=model, processing_class=tok, reward_funcs=reward, args=C(output_dir=d, **{**base, **kw}), train_dataset=ds, callbacks=[timer])
            tr.train()
        res[name] += timer.t[1:]  # skip the first step (warm-up)
ref = statistics.median(res["trl_dapo"])
print(f"{'variant':24s} {'median s/step':>14s} {'vs trl_dapo':>12s}  n")
for k, v in res.items():
    m = statistics.median(v)
    print(f"{k:24s} {m:14.3f} {m / ref:12.2f}  {len(v)}")
