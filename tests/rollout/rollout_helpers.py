"""Shared tiny models and slow references for the rollout tests (no downloads: random weights)."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

VOCAB = 40
PAD = 0


def make_llama(seed: int = 0, vocab: int = VOCAB, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=64, num_hidden_layers=layers, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=256,
    )
    return LlamaForCausalLM(cfg).eval()


def ref_greedy_alone(model, prompt, max_new_tokens, eos):
    """Greedy decoding of ONE prompt, no padding, no cache: re-run the whole sequence each step."""
    seq = list(prompt)
    out = []
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            tok = int(logits.argmax())
            out.append(tok)
            seq.append(tok)
            if eos is not None and tok == eos:
                break
    return out


def ref_logprobs_alone(model, prompt, response, temperature=1.0):
    """Per-token log-probs and entropies of `response` after `prompt`, one row, no padding, float64 math."""
    ids = torch.tensor([list(prompt) + list(response)])
    logits = model(input_ids=ids, use_cache=False).logits[0].double() / temperature
    P = len(prompt)
    lps, ents = [], []
    for j, tok in enumerate(response):  # slow loop on purpose
        logp_v = torch.log_softmax(logits[P - 1 + j], dim=-1)
        lps.append(logp_v[tok])
        ents.append(-(logp_v.exp() * logp_v).sum())
    if not lps:
        return torch.zeros(0, dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
    return torch.stack(lps), torch.stack(ents)
