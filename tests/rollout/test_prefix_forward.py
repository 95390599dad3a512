"""The prefix forward (each prompt once into the KV cache, the responses on top) against a plain
full forward of every row, for its three users: the update's logits path, the update's hidden-state
path (chunked head) and the teacher's shared privileged prompts."""

import pytest
import torch

from grpolab.rollout import left_pad, response_logprobs, sample, teacher_logprobs
from grpolab.rollout.cache import ForwardSignature
from grpolab.rollout.logprobs import prefix_forward, shared_prompt_fallback

from rollout_helpers import PAD, make_llama

PROMPTS = [[1, 5, 6, 7, 8], [1, 9, 10], [1, 11, 12, 13, 14, 15, 16, 2]]
TEACHER_PROMPTS = [[1, 30, 31, 5, 6, 7], [1], [1, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 3, 4, 5]]
G = 3


@pytest.fixture(scope="module")
def llama():
    return make_llama(seed=0)


@pytest.fixture(scope="module")
def rollout(llama):
    r = sample(llama, PROMPTS, group_size=G, max_new_tokens=10, eos_token_id=3, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(0))
    assert (r.response_lengths < r.response_ids.shape[1]).any()   # right padding present
    return r


def _full_forward(model, prompts_rows, responses, lengths):
    """Per row, unpadded: logits [T, V] and final hidden states [T, H] predicting each response token."""
    logits, hidden = [], []
    for prompt, resp, n in zip(prompts_rows, responses.tolist(), lengths.tolist()):
        ids = torch.tensor([list(prompt) + resp[:n]])
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
        P = len(prompt)
        logits.append(out.logits[0, P - 1 : P + n - 1])
        hidden.append(out.hidden_states[-1][0, P - 1 : P + n - 1])
    return logits, hidden


@torch.no_grad()
@pytest.mark.parametrize("hidden", [False, True])
def test_the_update_paths_equal_a_full_forward_per_row(llama, rollout, hidden):
    r = rollout
    got = prefix_forward(llama, ForwardSignature.of(llama), r.prompt_ids, r.prompt_mask, r.response_ids,
                         r.response_mask, hidden=hidden)
    assert got is not None                                         # the groups repeat their prompts
    rows = [p for p in PROMPTS for _ in range(G)]
    logits, states = _full_forward(llama, rows, r.response_ids, r.response_lengths)
    for b, want in enumerate(states if hidden else logits):
        n = want.shape[0]
        torch.testing.assert_close(got[b, :n], want, atol=2e-5, rtol=1e-5)


@torch.no_grad()
def test_the_teachers_shared_prompts_equal_a_full_forward_per_row(llama, rollout):
    r = rollout
    u_ids, u_mask = left_pad(TEACHER_PROMPTS, PAD)
    index = torch.arange(r.batch_size) // G
    got = prefix_forward(llama, ForwardSignature.of(llama), u_ids, u_mask, r.response_ids, r.response_mask,
                         prompt_of_row=index, hidden=True)
    _, states = _full_forward(llama, [TEACHER_PROMPTS[i] for i in index.tolist()], r.response_ids,
                              r.response_lengths)
    for b, want in enumerate(states):
        torch.testing.assert_close(got[b, : want.shape[0]], want, atol=2e-5, rtol=1e-5)
    last = prefix_forward(llama, ForwardSignature.of(llama), u_ids, u_mask, r.response_ids, r.response_mask,
                          prompt_of_row=index, hidden=True, forward_last=True)   # the teacher's query length
    assert last.shape == got.shape
    torch.testing.assert_close(last, got, atol=2e-5, rtol=1e-5)
    # and the teacher's log-probs through it equal the per-row (joint) teacher forward
    shared = teacher_logprobs(llama, u_ids, u_mask, r, prompt_index=index, return_kl=True)
    joint = teacher_logprobs(llama, u_ids[index], u_mask[index], r, return_kl=True)
    torch.testing.assert_close(shared.logp, joint.logp, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(shared.kl, joint.kl, atol=2e-5, rtol=1e-4)


def test_the_update_log_probs_and_gradients_equal_with_and_without_sharing(llama, rollout):
    grads = []
    for share in (False, True):
        llama.zero_grad()
        res = response_logprobs(llama, rollout, return_entropy=True, share_prompts=share)
        (res.logp.sum() + res.entropy.sum()).backward()
        grads.append((res.logp.detach(), torch.cat([p.grad.flatten() for p in llama.parameters()])))
    llama.zero_grad()
    torch.testing.assert_close(grads[0][0], grads[1][0], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(grads[0][1], grads[1][1], atol=1e-4, rtol=1e-4)


def test_the_fallback_is_decided_once(llama):
    sig = ForwardSignature.of(llama)
    ids, mask = left_pad(PROMPTS, PAD)
    assert shared_prompt_fallback(llama, sig, mask, n_rows=3) == "no prompt repeats"
    assert shared_prompt_fallback(llama, sig, mask, n_rows=None) is None   # the caller chose what to share
    assert shared_prompt_fallback(llama, sig, mask, n_rows=6) is None
    empty = mask.clone()
    empty[1] = 0
    assert shared_prompt_fallback(llama, sig, empty, n_rows=6) == "a prompt row is empty"
    # distinct prompts only (nothing repeats): the update takes the joint forward
    resp = torch.tensor([[4, 5], [6, 7], [8, 9]])
    assert prefix_forward(llama, sig, ids, mask, resp, torch.ones_like(resp)) is None
