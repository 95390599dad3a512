"""Worker for test_trl_ddp.py: 2 CPU processes (torchrun, gloo) run GrpolabGRPOTrainer's weights and
loss on their halves of one generation batch; rank 0 checks that the process-averaged gradient
equals grpolab's full-batch ``policy_loss(aggregation="balanced")`` gradient in one process.

A prompt group straddles the two processes (rows 4-7 with 6 rows per process), so the
Balanced-Aggregation weights are only right if they are computed from the gathered batch.
Exits 0 on success; prints the largest gradient difference.
"""

from __future__ import annotations

import sys
import tempfile

import torch
import torch.distributed as dist
from datasets import Dataset
from trl import GRPOTrainer

from grpolab.integrations.trl.trainer import GrpolabGRPOConfig, GrpolabGRPOTrainer
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.objectives import policy_loss
from grpolab.rollout.logprobs import response_logprobs

N_PER, G, T = 6, 4, 7


def main() -> int:
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64), seed=0)
    ds = Dataset.from_dict({"prompt": ["12+34="] * 24})
    import dataclasses

    names = {f.name for f in dataclasses.fields(GrpolabGRPOConfig)}
    ckpt = "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"
    with tempfile.TemporaryDirectory() as d:
        args = GrpolabGRPOConfig(
            output_dir=d, per_device_train_batch_size=N_PER, gradient_accumulation_steps=2, num_generations=G,
            max_completion_length=T, report_to="none", use_cpu=True, bf16=False, fp16=False, seed=0,
            grpolab_aggregation="balanced", grpolab_ratio="cumulative", epsilon=0.025, epsilon_high=0.05,
            grpolab_dual_clip=None, **{ckpt: False})
        tr = GrpolabGRPOTrainer(model=model, processing_class=tok, reward_funcs=lambda completions, **k: [0.0] * len(completions),
                                args=args, train_dataset=ds)
    rank, world = tr.accelerator.process_index, tr.accelerator.num_processes
    assert world == 2, world
    # one global generation batch, identical on every process
    g = torch.Generator().manual_seed(0)
    N = N_PER * world
    prompt = tok(["12+34="] * N, add_special_tokens=True, return_tensors="pt")
    comp = torch.randint(5, len(tok), (N, T), generator=g)
    lengths = torch.tensor([7, 3, 5, 1, 6, 7, 2, 4, 7, 5, 3, 6])
    cmask = (torch.arange(T) < lengths[:, None]).long()
    adv = torch.tensor([1.0, -0.5, -0.5, 0.0, 0.8, -1.2, 0.4, 0.0, -1.0, 1.0, 0.5, -0.5])
    with torch.no_grad():
        logp = response_logprobs(tr.model, (prompt["input_ids"], prompt["attention_mask"], comp, cmask)).logp
    old = logp + 0.3 * torch.randn(N, T, generator=g)
    rows = slice(rank * N_PER, (rank + 1) * N_PER)

    def fake_generate(self, inputs):  # TRL's part: the local slice of an already scored batch
        return {"prompt_ids": prompt["input_ids"][rows], "prompt_mask": prompt["attention_mask"][rows],
                "completion_ids": comp[rows], "completion_mask": cmask[rows], "advantages": adv[rows],
                "old_per_token_logps": old[rows], "num_items_in_batch": cmask.sum()}

    GRPOTrainer._generate_and_score_completions = fake_generate
    tr.model.train()
    out = tr._generate_and_score_completions([])
    # the trainer's micro-steps: this process's rows in 2 chunks (steps_per_generation = 2)
    tr.model.zero_grad()
    for sl in (slice(0, 2), slice(2, N_PER)):
        part = {k: (v[sl] if torch.is_tensor(v) and v.dim() > 0 else v) for k, v in out.items()}
        tr._compute_loss(tr.model, part).backward()
    grads = torch.cat([p.grad.flatten() for p in tr.model.parameters()])
    dist.all_reduce(grads)
    grads /= world  # what DDP does
    # each optimizer step covers 1 / (steps_per_generation / GA) = the whole batch here
    if rank == 0:
        tr.model.zero_grad()
        lp = response_logprobs(tr.model, (prompt["input_ids"], prompt["attention_mask"], comp, cmask)).logp
        ref, _ = policy_loss(lp, old, adv, cmask, group_ids=torch.arange(N) // G, ratio="cumulative",
                             aggregation="balanced", clip_low=0.025, clip_high=0.05, dual_clip=None)
        ref.backward()
        ref_g = torch.cat([p.grad.flatten() for p in tr.model.parameters()])
        diff = (grads - ref_g).abs().max().item()
        scale = ref_g.abs().max().item()
        print(f"max |grad diff| {diff:.3e} (max |grad| {scale:.3e})", flush=True)
        ok = torch.allclose(grads, ref_g, rtol=1e-4, atol=1e-6) and scale > 0
        dist.barrier()
        return 0 if ok else 1
    dist.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
