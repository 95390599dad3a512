"""teacher_logprobs(): alignment against a direct forward over [teacher prompt ; response] (left-padded
teacher prompts of different lengths), chunked full-vocabulary KL against a float64 per-row
reference, poisoned padding, the logits fallback, and teacher prompt building."""

import math

import pytest
import torch

from grpolab.models import build_tokenizer
from grpolab.rollout import (
    TeacherResult,
    encode_teacher_prompts,
    left_pad,
    response_logprobs,
    sample,
    teacher_logprobs,
)
from grpolab.tasks import TaskItem
from grpolab.teacher_text import DEFAULT_TEACHER_TEMPLATE, build_teacher_prompts, check_template

from rollout_helpers import PAD, VOCAB, make_llama, ref_logprobs_alone

PROMPTS = [[1, 5, 6, 7], [1, 9], [1, 3, 4, 5, 6, 7, 8, 2, 11]]
# teacher prompts: longer, shorter and much longer than the student's, so left-padding differs
TEACHER_PROMPTS = [[1, 30, 31, 5, 6, 7], [1], [1, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 3, 4, 5]]
G = 2


def _rollout(model, seed=0, T=12):
    return sample(model, PROMPTS, group_size=G, max_new_tokens=T, eos_token_id=3, pad_token_id=PAD,
                  generator=torch.Generator().manual_seed(seed))


def _teacher_batch():
    rows = [p for p in TEACHER_PROMPTS for _ in range(G)]
    return left_pad(rows, PAD)


def _ref_kl_row(teacher, student, t_prompt, s_prompt, resp, temperature=1.0):
    """Per-position KL(student || teacher) of one unpadded row, float64, explicit loop."""
    def logits(model, prompt):
        ids = torch.tensor([list(prompt) + list(resp)])
        return model(input_ids=ids, use_cache=False).logits[0].double() / temperature
    lt, ls = logits(teacher, t_prompt), logits(student, s_prompt)
    out = []
    for j in range(len(resp)):
        a = torch.log_softmax(ls[len(s_prompt) - 1 + j], -1)
        b = torch.log_softmax(lt[len(t_prompt) - 1 + j], -1)
        out.append(float((a.exp() * (a - b)).sum()))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("return_kl", [False, True])
def test_teacher_logp_aligns_with_a_direct_forward(llama, temperature, return_kl):
    r = _rollout(llama)
    assert (r.response_lengths < r.response_ids.shape[1]).any()
    t_ids, t_mask = _teacher_batch()
    assert len({int(x) for x in t_mask.sum(-1)}) == 3            # three different teacher lengths
    res = teacher_logprobs(llama, t_ids, t_mask, r, temperature=temperature, return_kl=return_kl, chunk_size=5)
    assert isinstance(res, TeacherResult) and res.logp.shape == r.response_ids.shape
    assert not res.logp.requires_grad
    for b in range(r.batch_size):
        tp = TEACHER_PROMPTS[b // G]
        resp = r.response_ids[b][r.response_mask[b].bool()].tolist()
        with torch.no_grad():
            lp, _ = ref_logprobs_alone(llama, tp, resp, temperature)
        n = len(resp)
        torch.testing.assert_close(res.logp[b, :n].double(), lp, atol=1e-5, rtol=0)
        assert (res.logp[b, n:] == 0).all()
    # the teacher really sees a different context: its scores differ from the student's
    s_lp = response_logprobs(llama, r, temperature=temperature).logp.detach()
    assert (res.logp - s_lp).abs().max() > 1e-2


def test_kl_matches_float64_reference_and_student_logp(llama):
    student = make_llama(1)                                       # a different student model
    r = _rollout(llama)
    t_ids, t_mask = _teacher_batch()
    res = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True, student=student, chunk_size=4)
    with torch.no_grad():
        s_lp = response_logprobs(student, r).logp
    torch.testing.assert_close(res.student_logp, s_lp, atol=1e-5, rtol=0)
    for b in range(r.batch_size):
        resp = r.response_ids[b][r.response_mask[b].bool()].tolist()
        sp = r.prompt_ids[b][r.prompt_mask[b].bool()].tolist()
        with torch.no_grad():
            ref = _ref_kl_row(llama, student, TEACHER_PROMPTS[b // G], sp, resp)
        n = len(resp)
        torch.testing.assert_close(res.kl[b, :n].double(), torch.tensor(ref, dtype=torch.float64), atol=2e-5, rtol=0)
        assert (res.kl[b, n:] == 0).all()
    assert (res.kl >= 0).all() and res.kl.max() > 1e-3


def test_chunked_kl_equals_unchunked(llama):
    r = _rollout(llama, seed=3)
    t_ids, t_mask = _teacher_batch()
    full = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True, chunk_size=10_000)
    for chunk, mb in ((1, None), (7, None), (3, 2)):
        part = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True, chunk_size=chunk, micro_batch_size=mb)
        torch.testing.assert_close(part.kl, full.kl, atol=1e-6, rtol=0)
        torch.testing.assert_close(part.logp, full.logp, atol=1e-6, rtol=0)
        torch.testing.assert_close(part.student_logp, full.student_logp, atol=1e-6, rtol=0)


def test_same_prompt_same_model_gives_zero_kl_and_student_logp(llama):
    r = _rollout(llama, seed=1)
    res = teacher_logprobs(llama, r.prompt_ids, r.prompt_mask, r, return_kl=True)
    assert res.kl.abs().max() < 1e-5
    torch.testing.assert_close(res.logp, res.student_logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.logp, r.sample_logp, atol=1e-4, rtol=0)


def test_poisoned_teacher_padding_changes_nothing(llama):
    r = _rollout(llama, seed=2)
    t_ids, t_mask = _teacher_batch()
    base = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True)
    g = torch.Generator().manual_seed(0)
    junk = torch.randint(0, VOCAB, t_ids.shape, generator=g)
    poisoned = torch.where(t_mask.bool(), t_ids, junk)
    resp = torch.where(r.response_mask.bool(), r.response_ids, torch.randint(0, VOCAB, r.response_ids.shape, generator=g))
    assert not torch.equal(poisoned, t_ids)
    res = teacher_logprobs(llama, poisoned, t_mask, (r.prompt_ids, r.prompt_mask, resp, r.response_mask), return_kl=True)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.kl, base.kl, atol=1e-5, rtol=0)
    # extra all-padding teacher columns (poisoned) change nothing either
    wide_ids = torch.cat([torch.randint(0, VOCAB, (t_ids.shape[0], 4), generator=g), poisoned], 1)
    wide_mask = torch.cat([torch.zeros(t_ids.shape[0], 4, dtype=torch.long), t_mask], 1)
    res = teacher_logprobs(llama, wide_ids, wide_mask, r)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)


def test_fallback_when_the_head_does_not_reproduce_the_logits(llama, monkeypatch):
    r = _rollout(llama, seed=4)
    t_ids, t_mask = _teacher_batch()
    base = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True)
    wrong = torch.nn.Linear(64, VOCAB, bias=False)
    monkeypatch.setattr(llama, "get_output_embeddings", lambda: wrong)
    res = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True, chunk_size=3)
    torch.testing.assert_close(res.kl, base.kl, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)
    u_ids, u_mask = left_pad(TEACHER_PROMPTS, PAD)
    res = teacher_logprobs(llama, u_ids, u_mask, r, return_kl=True, prompt_index=torch.arange(r.batch_size) // G)
    torch.testing.assert_close(res.kl, base.kl, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("return_kl", [False, True])
def test_shared_prefix_forward_equals_one_forward_per_row(llama, return_kl):
    # prompt_index: each distinct teacher prompt is prefilled once and its KV cache gathered per
    # row; rows in any order, some prompts used by one row only, one prompt unused
    r = _rollout(llama, seed=5)
    t_ids, t_mask = _teacher_batch()
    per_row = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=return_kl)
    u_ids, u_mask = left_pad(TEACHER_PROMPTS + [[1, 2, 3]], PAD)          # [4, P'], prompt 3 unused
    index = torch.arange(r.batch_size) // G
    res = teacher_logprobs(llama, u_ids, u_mask, r, return_kl=return_kl, prompt_index=index, chunk_size=5)
    torch.testing.assert_close(res.logp, per_row.logp, atol=1e-5, rtol=0)
    if return_kl:
        torch.testing.assert_close(res.kl, per_row.kl, atol=1e-5, rtol=0)
        torch.testing.assert_close(res.student_logp, per_row.student_logp, atol=1e-5, rtol=0)
    # a subset of rows, shuffled, in micro-batches
    rows = torch.tensor([5, 0, 3, 4])
    part = teacher_logprobs(llama, u_ids, u_mask, r.select(rows), return_kl=return_kl, prompt_index=index[rows],
                            micro_batch_size=3)
    torch.testing.assert_close(part.logp, per_row.logp[rows], atol=1e-5, rtol=0)
    # and against the slow per-row float64 reference directly
    for j, b in enumerate(rows.tolist()):
        resp = r.response_ids[b][r.response_mask[b].bool()].tolist()
        with torch.no_grad():
            lp, _ = ref_logprobs_alone(llama, TEACHER_PROMPTS[b // G], resp)
        torch.testing.assert_close(part.logp[j, : len(resp)].double(), lp, atol=1e-5, rtol=0)


def test_bad_inputs_raise(llama):
    r = _rollout(llama)
    t_ids, t_mask = _teacher_batch()
    with pytest.raises(ValueError, match="repeat each prompt group_size times"):
        teacher_logprobs(llama, t_ids[:3], t_mask[:3], r)
    with pytest.raises(ValueError, match=r"prompt_index must lie in \[0, 3\)"):
        teacher_logprobs(llama, t_ids[:3], t_mask[:3], r, prompt_index=torch.full((r.batch_size,), 3))
    with pytest.raises(ValueError, match="prompt_index must have shape"):
        teacher_logprobs(llama, t_ids[:3], t_mask[:3], r, prompt_index=torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match="return_kl=True needs the student's prompts"):
        teacher_logprobs(llama, t_ids, t_mask, (r.response_ids, r.response_mask), return_kl=True)
    # (response_ids, response_mask) alone is enough without the KL
    res = teacher_logprobs(llama, t_ids, t_mask, (r.response_ids, r.response_mask))
    assert res.kl is None and res.student_logp is None


# ------------------------------------------------------------------ teacher prompts
def test_default_template_fits_the_tiny_alphabet():
    tok = build_tokenizer()
    item = TaskItem(prompt="7+5-3=", reference="9", privileged="7+5=12;12-3=9#9")
    (text,) = build_teacher_prompts([item])
    assert text == "7+5-3=\nhere is a reference solution: 7+5=12;12-3=9#9\nsolve it in your own way.\n7+5-3="
    ids = tok(DEFAULT_TEACHER_TEMPLATE.format(prompt="", privileged="", reference=""), add_special_tokens=False)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text


def test_build_and_encode_teacher_prompts():
    tok = build_tokenizer()
    items = [TaskItem(prompt="1+2=", reference="3", privileged=""),      # falls back to the reference
             TaskItem(prompt="rev 12=", reference="21", privileged="#21", reward="exact")]
    texts = build_teacher_prompts(items, template="{privileged}|{prompt}".replace("|", "\n"))
    assert texts == ["3\n1+2=", "#21\nrev 12="]
    ids, mask = encode_teacher_prompts(tok, texts, group_size=3)
    assert ids.shape[0] == 6 and mask.shape == ids.shape
    lens = mask.sum(-1).tolist()
    assert lens == [1 + 6] * 3 + [1 + 11] * 3                      # BOS + characters, repeated G times
    assert (ids[:, -1] == tok.convert_tokens_to_ids("=")).all()   # left-padded: prompts end flush right
    assert ids[0, -lens[0]] == tok.bos_token_id


@pytest.mark.parametrize("template,match", [
    ("{prompt} only", "must contain"),
    ("{privileged}", "must contain"),
    ("{prompt} {answer}", "unknown fields"),
    ("{prompt {privileged}", "not a valid format string"),
])
def test_bad_templates_raise(template, match):
    with pytest.raises(ValueError, match=match):
        check_template(template)


def test_kl_stays_finite_when_probabilities_underflow(llama):
    # temperature 1e-3: most of the vocabulary gets probability exactly 0 in float32; 0 * log 0
    # must count as 0 (no NaN), and the KL stays >= 0
    r = sample(llama, PROMPTS, group_size=1, max_new_tokens=6, eos_token_id=3, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(0))
    t_ids, t_mask = left_pad(TEACHER_PROMPTS, PAD)
    res = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True, temperature=1e-3)
    assert torch.isfinite(res.kl).all() and (res.kl >= 0).all()
    assert math.isfinite(float(res.logp.sum())) and res.kl.max() > 0


def test_the_teacher_and_the_update_share_one_head_rule(llama, monkeypatch):
    # a head module that reproduces the logits but is not a plain bias-free nn.Linear: the update
    # forward (rollout/logprobs.py) takes the model's own logits then, and so does the teacher
    # (the same values, through the fallback), joint and shared-prefix paths alike
    from grpolab.rollout.logprobs import _head_weight

    r = _rollout(llama, seed=6)
    t_ids, t_mask = _teacher_batch()
    base = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True)
    real = llama.get_output_embeddings()
    wrapped = torch.nn.Sequential(real)
    monkeypatch.setattr(llama, "get_output_embeddings", lambda: wrapped)
    assert _head_weight(llama) is None
    res = teacher_logprobs(llama, t_ids, t_mask, r, return_kl=True)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.kl, base.kl, atol=1e-5, rtol=0)
    u_ids, u_mask = left_pad(TEACHER_PROMPTS, PAD)
    res = teacher_logprobs(llama, u_ids, u_mask, r, return_kl=True, prompt_index=torch.arange(r.batch_size) // G)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)
