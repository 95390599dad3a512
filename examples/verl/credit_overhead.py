"""Driver-side cost of grpolab's verl credit extension per step, without the teacher forward.

Everything the extension does on verl's driver for one training batch -- teacher chats, chat
template, left-padded ``[teacher prompt ; response]`` batch, verl's padding converters, the
data-parallel balancing, re-alignment and the credit math -- with a worker group that returns
zeros instead of running a model (the forward itself runs on the GPU workers and is not measured
here). Batch: 128 prompts x 8 samples (the example's ``train_batch_size=128``, ``rollout.n=8``),
responses of 200-1024 tokens, MATH-length question and solution, grpolab's character tokenizer
(a stand-in for the policy's; no download). Needs verl 0.9.x (``pip install 'grpolab[verl]'``)::

    OMP_NUM_THREADS=1 python examples/verl/credit_overhead.py
"""

from __future__ import annotations

import time

import torch


def main() -> None:
    from verl.utils import tensordict_utils as tu

    from grpolab.integrations.verl import credit as vc
    from grpolab.models import build_tokenizer
    from grpolab.objectives import group_advantages

    tok = build_tokenizer()
    tok.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")

    class ZeroWorkers:  # 8 data-parallel ranks; log-probs 0 of the right nested shape
        _dispatch_info: dict = {}

        def _query_dispatch_info(self, mesh):
            return list(range(8))

        def compute_ref_log_prob(self, td):
            n = td["input_ids"].offsets().diff().tolist()
            return tu.get_tensordict({"log_probs": torch.nested.as_nested_tensor([torch.zeros(k) for k in n],
                                                                                 layout=torch.jagged)})

    B, G, T = 1024, 8, 1024
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(200, T + 1, (B,), generator=g)
    mask = (torch.arange(T) < lengths[:, None]).long()
    responses = torch.randint(4, len(tok), (B, T), generator=g) * mask
    rewards = torch.randint(0, 2, (B,), generator=g).float()
    adv = group_advantages(rewards, torch.arange(B) // G)[:, None] * mask
    raw, extra = [], []
    for i in range(B // G):
        q = f"problem {i}: what is the sum of all positive integers n such that n^2 - 19n + 99 is a square? " * 3
        s = f"solution {i}: write n^2 - 19n + 99 = k^2 and complete the square: (2n - 19)^2 - 4k^2 = -35. " * 8
        raw += [[{"role": "user", "content": q}]] * G
        extra += [{"solution": s}] * G
    kw = dict(advantages=adv.float(), old_log_probs=-torch.rand(B, T, generator=g) * mask, responses=responses,
              response_lengths=lengths, response_mask=mask, raw_prompts=raw, extra_infos=extra,
              teacher=vc.TeacherCall(ZeroWorkers(), "compute_ref_log_prob", "ref"), temperature=1.0)
    print("| method | scored rows | teacher prompt tokens | driver time per step (median of 3) |")
    print("|---|---|---|---|")
    for name in ("rlsd", "gear"):
        ext = vc.CreditExtension(vc.VerlCreditConfig(name=name), tok,
                                 encode=vc.TeacherPromptEncoder(tok, hf_model_type="llama"))
        out = ext(step=0, **kw)  # warm-up (GEAR: the boundary-token scan of the vocabulary)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            out = ext(step=0, **kw)
            times.append(time.perf_counter() - t0)
        n_prompt = len(ext.teacher_prompts(raw, extra, [0])[0])
        print(f"| {name} | {int(out.scored.sum())}/{B} | {n_prompt} | {sorted(times)[1]:.2f} s |")


if __name__ == "__main__":
    main()
