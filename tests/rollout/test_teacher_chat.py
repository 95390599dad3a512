"""The privileged teacher prompt on a chat template: built at the message level, rendered by the
student's own template, so the sampled response tokens follow both prompts identically (the
teacher's log-probs equal a direct forward over [teacher chat ; the same response ids])."""

import pytest
import torch
from chat_helpers import build_chat_model, build_chat_tokenizer

from grpolab.models import stop_token_ids
from grpolab.rollout import left_pad, sample, teacher_logprobs
from grpolab.teacher_text import teacher_messages
from grpolab.tasks import PromptFormat, TaskItem

ITEMS = [TaskItem(prompt="Natalia sold 48 clips in April and half as many in May. How many in all?",
                  reference="72", privileged="48/2 = 24. 48+24 = 72. #### 72"),
         TaskItem(prompt="How many clips?", reference="5", privileged="")]
TEMPLATE = "{prompt}\n\nHere is a reference solution:\n{privileged}\n\nSolve the problem in your own way."


@pytest.fixture(scope="module")
def chat():
    tok = build_chat_tokenizer()
    return build_chat_model(tok, hidden=32, layers=2), tok


@pytest.mark.parametrize("placement", ["user", "system"])
def test_privileged_context_lands_in_the_conversation_not_the_assistant_turn(chat, placement):
    _, tok = chat
    fmt = PromptFormat(chat_template="on", system_prompt="You are a helpful assistant.")
    for it in ITEMS:
        student = fmt.render(it, tok)
        t_msgs = teacher_messages(fmt.messages(it), it, placement=placement, template=TEMPLATE,
                                  system_template="Reference solution: {privileged}")
        teacher = fmt.render_messages(t_msgs, tok)
        priv = it.privileged or it.reference
        header = "<|im_start|>assistant\n"
        assert student.endswith(header) and teacher.endswith(header)
        assert teacher.count(header) == 1 and teacher.count(it.prompt) == 1      # nothing repeated
        assert teacher.index(priv) < teacher.rindex(header)                      # before the assistant turn
        assert teacher.count("<|im_start|>system") == 1                          # one system message
        if placement == "system":
            assert teacher.index(priv) < teacher.index("<|im_start|>user")
        else:
            user = teacher[teacher.index("<|im_start|>user"):]
            assert priv in user[: user.index("<|im_end|>")]
        # the student's ids end with the same generation-prompt ids as the teacher's
        s_ids, t_ids = fmt.encode_messages(fmt.messages(it), tok), fmt.encode_messages(t_msgs, tok)
        tail = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        assert s_ids[-len(tail):] == tail and t_ids[-len(tail):] == tail


def test_teacher_scores_the_same_response_tokens_as_a_direct_forward(chat):
    model, tok = chat
    fmt = PromptFormat(chat_template="on")
    G = 2
    s_prompts = fmt.encode(ITEMS, tok)
    rollout = sample(model, s_prompts, group_size=G, max_new_tokens=10, temperature=1.0,
                     eos_token_id=stop_token_ids(model, tok), pad_token_id=tok.pad_token_id,
                     generator=torch.Generator().manual_seed(0))
    t_prompts = [fmt.encode_messages(teacher_messages(fmt.messages(it), it, template=TEMPLATE), tok) for it in ITEMS]
    t_ids, t_mask = left_pad(t_prompts, tok.pad_token_id)
    res = teacher_logprobs(model, t_ids, t_mask, rollout, prompt_index=torch.arange(len(ITEMS) * G) // G,
                           return_kl=True)
    for b in range(rollout.batch_size):
        n = int(rollout.response_mask[b].sum())
        resp = rollout.response_ids[b, :n].tolist()
        full = torch.tensor([t_prompts[b // G] + resp])
        with torch.no_grad():
            logits = model(input_ids=full).logits[0].double()
        P = len(t_prompts[b // G])
        want = torch.log_softmax(logits[P - 1:P - 1 + n], -1).gather(-1, torch.tensor(resp)[:, None]).squeeze(-1)
        assert torch.allclose(res.logp[b, :n].double(), want, atol=1e-4)
        assert (res.logp[b, n:] == 0).all()
        # and the student side of the KL is the student's own chat prompt
        s_full = torch.tensor([s_prompts[b // G] + resp])
        with torch.no_grad():
            s_logits = model(input_ids=s_full).logits[0].double()
        Ps = len(s_prompts[b // G])
        s_want = torch.log_softmax(s_logits[Ps - 1:Ps - 1 + n], -1).gather(-1, torch.tensor(resp)[:, None]).squeeze(-1)
        assert torch.allclose(res.student_logp[b, :n].double(), s_want, atol=1e-4)
