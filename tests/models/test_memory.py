"""The activation-lean forward (``grpolab.models.memory``) is the model's own function with fewer
saved tensors.

On a real-architecture model (a tiny ``LlamaForCausalLM`` with grouped-query attention, prompts
rendered through a ChatML chat template), full fine-tuning and LoRA, shared prompts and joint:

* :func:`lean_swiglu` gives the same log-probabilities and gradients as the unchanged model, really
  saves fewer bytes for the backward, changes every Llama MLP once and leaves an MLP alone whose
  forward is not ``down(silu(gate(x)) * up(x))``;
* :class:`SiluMul`'s backward passes ``gradcheck``;
* :func:`grouped_kv_attention` (what ``response_logprobs`` runs under) saves the key/value heads
  instead of their repeated copies, with the same values and gradients, restores the environment and
  leaves a user's own setting alone.
"""

import copy
import os

import pytest
import torch
from chat_helpers import build_chat_tokenizer

from grpolab.models.memory import FORCE_GQA_ENV, SiluMul, grouped_kv_attention, lean_swiglu
from grpolab.rollout import response_logprobs, sample
from grpolab.tasks import PromptFormat, TaskItem

QUESTIONS = ["Natalia sold 48 clips in April and half as many in May. How many in all?",
             "Weng earns $12 an hour. How much for 50 minutes?"]


@pytest.fixture(scope="module")
def chat():
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_chat_tokenizer()
    prompts = PromptFormat(chat_template="on").encode([TaskItem(prompt=q, reference="1") for q in QUESTIONS], tok)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, intermediate_size=96, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=None,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    model = LlamaForCausalLM(cfg).eval()
    stops = [tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140))  # varied lengths
    r = sample(model, prompts, group_size=3, max_new_tokens=12, eos_token_id=stops, pad_token_id=tok.pad_token_id,
               generator=torch.Generator().manual_seed(0))
    assert r.response_mask.sum(-1).unique().numel() > 1 and r.prompt_mask.sum(-1).unique().numel() > 1
    return model, r


def _score(model, r, share):
    """Values, gradients and the bytes autograd saved (weights excluded) of one scoring pass."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    model.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        res = response_logprobs(model, r, return_entropy=True, share_prompts=share)
    w = torch.linspace(-1, 1, res.logp.numel()).view_as(res.logp)
    ((res.logp * w).sum() + 0.3 * res.entropy.sum()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return res, grads, sum(saved.values())


def _assert_same(a, b, tol=1e-5):
    (ra, ga, _), (rb, gb, _) = a, b
    torch.testing.assert_close(ra.logp, rb.logp, atol=tol, rtol=0)
    torch.testing.assert_close(ra.entropy, rb.entropy, atol=tol, rtol=0)
    assert ga.keys() == gb.keys() and gb
    for k in gb:
        scale = float(gb[k].abs().max())
        assert scale > 0, k
        torch.testing.assert_close(ga[k], gb[k], atol=tol * scale, rtol=0, msg=k)


@pytest.mark.parametrize("share", [False, True])
@pytest.mark.parametrize("lora", [False, True])
def test_lean_swiglu_same_values_and_gradients_fewer_saved_bytes(chat, share, lora):
    model, r = chat
    plain = copy.deepcopy(model)
    if lora:
        from grpolab.models.lora import apply_lora

        apply_lora(plain, {"r": 4, "alpha": 8})
        torch.manual_seed(1)
        for n, p in plain.named_parameters():  # non-zero B: the adapters change the forward
            if "lora_B" in n:
                p.data.normal_(0, 0.1)
    lean = copy.deepcopy(plain)
    assert lean_swiglu(lean) == 2  # one per decoder layer
    assert lean_swiglu(lean) == 0  # once
    base, fast = _score(plain, r, share), _score(lean, r, share)
    _assert_same(fast, base)
    # one float tensor fewer per computed position, layer (2) and intermediate unit (96): silu(gate)
    assert base[2] - fast[2] >= 0.95 * _positions(r, share) * 2 * 96 * 4, (base[2], fast[2])


def _positions(r, share):
    """Positions the forward computes: every padded ``[prompt ; response]`` column (joint), or each
    distinct prompt once plus every row's response tokens but the last (shared prompts)."""
    B, P, T = r.batch_size, r.prompt_ids.shape[1], r.response_ids.shape[1]
    return (B // 3) * P + B * (T - 1) if share else B * (P + T)


def test_silu_mul_gradcheck():
    g = torch.Generator().manual_seed(0)
    gate = torch.randn(3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    up = torch.randn(3, 5, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(SiluMul.apply, (gate, up))
    torch.testing.assert_close(SiluMul.apply(gate, up), torch.nn.functional.silu(gate) * up)


def test_lean_swiglu_leaves_other_mlps_alone():
    class Mlp(torch.nn.Module):
        def __init__(self, act, wiring):
            super().__init__()
            self.gate_proj, self.up_proj = torch.nn.Linear(4, 6), torch.nn.Linear(4, 6)
            self.down_proj, self.act_fn, self.wiring = torch.nn.Linear(6, 4), act, wiring

        def forward(self, x):
            if self.wiring == "sum":
                return self.down_proj(self.act_fn(self.gate_proj(x)) + self.up_proj(x))
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    m = torch.nn.ModuleList([Mlp(torch.nn.GELU(), "product"), Mlp(torch.nn.SiLU(), "sum"),
                             Mlp(torch.nn.SiLU(), "product")])
    assert lean_swiglu(m) == 1
    assert "forward" not in vars(m[0]) and "forward" not in vars(m[1]) and "forward" in vars(m[2])


@pytest.mark.parametrize("share", [False, True])
def test_grouped_kv_attention_saves_key_value_heads_not_copies(chat, share, monkeypatch):
    model, r = chat
    monkeypatch.setenv(FORCE_GQA_ENV, "0")  # the user's setting wins: repeated keys/values
    repeated = _score(model, r, share)
    monkeypatch.delenv(FORCE_GQA_ENV)
    grouped = _score(model, r, share)  # response_logprobs' own default
    assert FORCE_GQA_ENV not in os.environ  # restored
    _assert_same(grouped, repeated)
    # keys and values (2) held for 2 key/value heads instead of 6 query heads (4 fewer) of 8 floats,
    # per attended key position and layer (2): at least each row's P + T - 1 keys
    keys = r.batch_size * (r.prompt_ids.shape[1] + r.response_ids.shape[1] - 1)
    assert repeated[2] - grouped[2] >= 0.95 * keys * 2 * 2 * 4 * 8 * 4, (repeated[2], grouped[2])


def test_grouped_kv_attention_only_on_cpu_and_restores(chat):
    model, _ = chat
    with grouped_kv_attention(model):
        assert os.environ[FORCE_GQA_ENV] == "1"
    assert FORCE_GQA_ENV not in os.environ
    meta = torch.nn.Linear(2, 2, device="meta")
    with grouped_kv_attention(meta):
        assert FORCE_GQA_ENV not in os.environ
