"""RLSD / GEAR inside verl (grpolab.integrations.verl.credit): CPU tests in CI's verl environment.

verl's real ``DataProto``, padding converters, v1 trainer (``_compute_advantage``,
``_init_resource_pool_mgr``) and task runner run here; only the parts that need Ray and GPUs are
stood in for: the worker group (:class:`StandInWorkerGroup` runs a tiny Hugging Face causal LM on
CPU, on verl's nested no-padding batch, the way verl's engine lays it out) and the
TransferQueue (:class:`FakeTQ`, an in-memory key-value store with TransferQueue's get/put calls).

Expected values never come from the extension: teacher log-probs from a direct, unpadded forward
of ``[teacher prompt ; response]`` per row, with the teacher prompt written out by hand and
tokenised by the tokenizer's own ``apply_chat_template``; advantages from
``grpolab.objectives.rlsd_advantages`` / ``gear_advantages`` on those log-probs.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

if os.environ.get("GRPOLAB_REQUIRE_VERL"):  # the CI's verl environment: a missing verl is a failure
    import verl  # noqa: F401
else:
    pytest.importorskip("verl", reason="verl runs in its own environment: pip install -e '.[test,verl]'")
    pytest.importorskip("transfer_queue", reason="verl's v1 trainer needs TransferQueue: pip install -e '.[verl]'")
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.utils.tensordict_utils import chunk_tensordict, concat_tensordict, list_of_dict_to_tensordict  # noqa: E402

from grpolab.integrations.verl import credit as vc  # noqa: E402
from grpolab.integrations.verl import main as verl_main  # noqa: E402
from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer  # noqa: E402
from grpolab.objectives import gear_advantages, group_advantages, rlsd_advantages  # noqa: E402

SMALL = TinyModelConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
CHAT = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}")
TEMPLATE = "{prompt}\nreference: {privileged}\nnow solve it.\n{prompt}"
SYSTEM = "you add numbers."
TEMP = 0.7


@pytest.fixture(scope="module")
def tok():
    t = build_tokenizer()
    t.chat_template = CHAT
    return t


@pytest.fixture(scope="module")
def model(tok):
    return build_tiny_model(tok, SMALL, seed=0).eval()


class StandInWorkerGroup:
    """A verl worker group on CPU: ``compute_log_prob`` / ``compute_ref_log_prob`` on a tiny HF model.

    Like verl's dispatch it splits the batch evenly over ``dp`` ranks (``chunk_tensordict`` refuses
    uneven splits) and concatenates the outputs; like verl's engine it reads the nested
    ``input_ids`` / ``position_ids`` and returns nested ``log_probs`` over the whole sequence, position
    ``j`` holding the log-prob of token ``j + 1``. Each rank runs one left-padded batched forward.
    """

    def __init__(self, model, dp: int = 1):
        self.model = model
        self.dp = dp
        self._dispatch_info = {}
        self.calls = []

    def _query_dispatch_info(self, mesh):
        return [r % self.dp for r in range(2 * self.dp)]  # 2 ranks per dp group (e.g. tensor parallel)

    def _forward(self, td):
        ids = td["input_ids"]
        pos = td["position_ids"]
        temp = float(tu.get(td, "temperature"))
        rows_ids, rows_pos = ids.unbind(), pos.unbind()
        L = max(len(r) for r in rows_ids)
        b = len(rows_ids)
        x = torch.zeros(b, L, dtype=torch.long)
        p = torch.zeros(b, L, dtype=torch.long)
        a = torch.zeros(b, L, dtype=torch.long)
        for i, (r, q) in enumerate(zip(rows_ids, rows_pos)):
            x[i, L - len(r):], p[i, L - len(r):], a[i, L - len(r):] = r, q, 1
        with torch.no_grad():
            logits = self.model(input_ids=x, attention_mask=a, position_ids=p).logits.float() / temp
        lp = torch.log_softmax(logits, -1)
        out = []
        for i, r in enumerate(rows_ids):
            n = len(r)
            row = lp[i, L - n:]
            nxt = torch.zeros(n)
            nxt[:-1] = row[:-1].gather(-1, r[1:].unsqueeze(-1)).squeeze(-1)
            out.append(nxt)
        return tu.get_tensordict({"log_probs": torch.nested.as_nested_tensor(out, layout=torch.jagged)})

    def _call(self, name, td):
        self.calls.append({"method": name, "rows": len(td), "no_lora_adapter": tu.get(td, "no_lora_adapter", False),
                           "temperature": float(tu.get(td, "temperature"))})
        assert {"input_ids", "position_ids", "loss_mask", "prompts", "responses"} <= set(td.keys())
        return concat_tensordict([self._forward(c) for c in chunk_tensordict(td, self.dp)])

    def compute_log_prob(self, td):
        return self._call("compute_log_prob", td)

    def compute_ref_log_prob(self, td):
        return self._call("compute_ref_log_prob", td)


# ------------------------------------------------------------------------------------------------
# a batch as verl's v1 trainer holds it at _compute_advantage time

QUESTIONS = ["what is 12+34?", "7+5?", "add 101 and 99, then tell me the sum please."]
SOLUTIONS = ["12+34=46", "7+5=12; the answer is 12", "101+99=200"]
G = 3


def _rows(tok, seed=0):
    """9 rows (3 prompts x 3 samples) with ragged responses, one with an observation token inside."""
    g = torch.Generator().manual_seed(seed)
    B, T = len(QUESTIONS) * G, 9
    lengths = torch.tensor([9, 4, 7, 1, 9, 6, 3, 8, 5])
    V = len(tok)
    responses = torch.randint(4, V, (B, T), generator=g)
    responses[:, 2] = tok.convert_tokens_to_ids("\n")  # a GEAR segment boundary inside every response
    valid = torch.arange(T) < lengths[:, None]
    responses = torch.where(valid, responses, torch.zeros_like(responses))
    mask = valid.long()
    mask[0, 3] = 0  # an observation (tool) token: attended to, not scored
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])  # prompt 1: all equal -> A = 0
    adv_B = group_advantages(rewards, torch.arange(B) // G)
    adv = adv_B[:, None] * mask  # verl's GRPO: the sequence advantage on every response token
    old = -torch.rand(B, T, generator=g) * 3 * mask
    raw = [[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTIONS[i // G]}] for i in range(B)]
    extra = [{"index": i // G, "solution": SOLUTIONS[i // G]} for i in range(B)]
    return dict(advantages=adv.float(), old_log_probs=old.float(), responses=responses, response_lengths=lengths,
                response_mask=mask, raw_prompts=raw, extra_infos=extra), adv_B


def _expected_teacher_logp(tok, model, rows):
    """Direct forward of [teacher prompt ; response] per row: no padding, prompt written by hand."""
    B, T = rows["response_mask"].shape
    out = torch.zeros(B, T)
    for i in range(B):
        q, s = QUESTIONS[i // G], SOLUTIONS[i // G]
        msgs = [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"{q}\nreference: {s}\nnow solve it.\n{q}"}]
        p = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
        p = list(p["input_ids"] if hasattr(p, "keys") else p)
        n = int(rows["response_lengths"][i])
        r = rows["responses"][i, :n]
        x = torch.tensor(p + r.tolist()).unsqueeze(0)
        with torch.no_grad():
            lp = torch.log_softmax(model(input_ids=x).logits[0].float() / TEMP, -1)
        P = len(p)
        out[i, :n] = lp[P - 1:P - 1 + n].gather(-1, r.unsqueeze(-1)).squeeze(-1)
    return out * rows["response_mask"]


def _ext(tok, **kw):
    cfg = vc.VerlCreditConfig(**{"name": "rlsd", "chat_template": TEMPLATE, **kw})
    return vc.CreditExtension(cfg, tok, encode=vc.TeacherPromptEncoder(tok, hf_model_type="llama"))


def _call(wg, method="compute_ref_log_prob", mesh="ref", **kw):
    return vc.TeacherCall(wg, method, mesh, **kw)


@pytest.mark.parametrize("dp", [1, 2, 4])
def test_teacher_logprobs_equal_a_direct_forward(tok, model, dp):
    """Left-padded teacher prompts of different lengths, ragged responses, an observation token,
    uneven dp splits: every scored row's teacher log-probs equal the direct forward."""
    rows, adv_B = _rows(tok)
    wg = StandInWorkerGroup(model, dp=dp)
    out = _ext(tok)(step=0, teacher=_call(wg), temperature=TEMP, **rows)
    expected = _expected_teacher_logp(tok, model, rows)
    scored = adv_B != 0
    assert scored.sum() == 6 and not scored[3:6].any()
    torch.testing.assert_close(out.teacher_logp[scored], expected[scored], rtol=1e-5, atol=1e-5)
    assert torch.equal(out.teacher_logp[~scored], torch.zeros_like(out.teacher_logp[~scored]))
    assert out.teacher_logp[0, 3] == 0 and expected[0, 4] != 0  # the observation token is not scored
    # zero-advantage rows were not sent: 6 rows, rounded up to the dp size by repeating a row
    assert [c["rows"] for c in wg.calls] == [6 + (-6) % dp]
    assert wg.calls[0]["temperature"] == TEMP and wg.calls[0]["no_lora_adapter"] is False


def test_advantages_equal_rlsd_advantages(tok, model):
    rows, adv_B = _rows(tok)
    ext = _ext(tok, name="rlsd", lam=0.5, lam_end=0.0, lam_steps=10, eps_w=0.2)
    out = ext(step=4, teacher=_call(StandInWorkerGroup(model)), temperature=TEMP, **rows)
    teacher = _expected_teacher_logp(tok, model, rows)
    ref = rlsd_advantages(adv_B, rows["old_log_probs"], teacher, rows["response_mask"], lam=0.3, eps_w=0.2)
    torch.testing.assert_close(out.advantages, ref.float(), rtol=1e-5, atol=1e-6)
    assert not torch.equal(out.advantages, rows["advantages"])  # the credit did reweight
    assert out.metrics["credit/lam"] == pytest.approx(0.3)
    assert out.metrics["credit/scored_rows_frac"] == pytest.approx(6 / 9)
    # negative_only: rows with A > 0 keep their advantage exactly
    neg = _ext(tok, name="rlsd", negative_only=True)(step=0, teacher=_call(StandInWorkerGroup(model)),
                                                      temperature=TEMP, **rows)
    pos = adv_B > 0
    torch.testing.assert_close(neg.advantages[pos], rows["advantages"][pos], rtol=0, atol=0)
    ref_neg = rlsd_advantages(adv_B, rows["old_log_probs"], teacher, rows["response_mask"], lam=0.5, eps_w=0.2,
                              negative_only=True)
    torch.testing.assert_close(neg.advantages, ref_neg.float(), rtol=1e-5, atol=1e-6)


def test_advantages_equal_gear_advantages(tok, model):
    rows, adv_B = _rows(tok)
    ext = _ext(tok, name="gear", lam=0.5, lam_schedule="constant", gear_threshold="quantile", gear_quantile=0.5)
    out = ext(step=7, teacher=_call(StandInWorkerGroup(model)), temperature=TEMP, **rows)
    teacher = _expected_teacher_logp(tok, model, rows)
    boundary = torch.isin(rows["responses"], torch.tensor(tok.convert_tokens_to_ids(["\n", ";"])))
    ref = gear_advantages(adv_B, rows["old_log_probs"], teacher, rows["response_mask"], lam=0.5, eps_w=0.2,
                          threshold="quantile", quantile=0.5, boundary_mask=boundary)
    torch.testing.assert_close(out.advantages, ref.advantages.float(), rtol=1e-5, atol=1e-6)
    assert (ref.segment_ids > 0).any()  # segments formed, so the boundaries mattered
    want = {"credit/segments_per_seq", "credit/segment_len", "credit/kl_sampled", "credit/delta_mean"}
    assert want <= set(out.metrics)


def test_each_distinct_teacher_chat_is_tokenised_once(tok, model):
    rows, _ = _rows(tok)
    enc = vc.TeacherPromptEncoder(tok, hf_model_type="llama")
    seen = []

    def counting(messages):
        seen.append(messages[-1]["content"])
        return enc(messages)

    ext = vc.CreditExtension(vc.VerlCreditConfig(name="rlsd", chat_template=TEMPLATE), tok, encode=counting)
    ext(step=0, teacher=_call(StandInWorkerGroup(model)), temperature=TEMP, **rows)
    assert len(seen) == 2 and len(set(seen)) == 2  # 6 scored rows, 2 prompt groups (group 1 has A = 0)


def test_all_zero_advantages_send_nothing_to_the_teacher(tok, model):
    rows, _ = _rows(tok)
    rows["advantages"] = torch.zeros_like(rows["advantages"])
    wg = StandInWorkerGroup(model)
    out = _ext(tok)(step=0, teacher=_call(wg), temperature=TEMP, **rows)
    assert wg.calls == [] and torch.equal(out.advantages, rows["advantages"])
    assert out.metrics["credit/scored_rows_frac"] == 0.0


@pytest.mark.parametrize("kw,expected", [
    (dict(lam=0.5, lam_end=0.0, lam_steps=50), [0.5, 0.25, 0.0, 0.0]),
    (dict(lam=0.5, lam_end=0.1, lam_steps=0), [0.1, 0.1, 0.1, 0.1]),
    (dict(lam=0.5, lam_end=0.0, lam_steps=50, lam_schedule="constant"), [0.5, 0.5, 0.5, 0.5]),
])
def test_lam_schedule_follows_the_config(tok, model, kw, expected):
    rows, _ = _rows(tok)
    ext, wg = _ext(tok, **kw), StandInWorkerGroup(model)
    outs = [ext(step=s, teacher=_call(wg), temperature=TEMP, **rows) for s in (0, 25, 50, 80)]
    assert [o.metrics["credit/lam"] for o in outs] == pytest.approx(expected)
    for o, lam in zip(outs, expected):  # lam = 0 reproduces verl's advantages exactly, lam > 0 does not
        assert torch.equal(o.advantages, rows["advantages"]) == (lam == 0.0)


def test_missing_privileged_key_names_the_key_and_the_fix(tok, model):
    rows, _ = _rows(tok)
    rows["extra_infos"][1] = {"index": 0}
    with pytest.raises(KeyError, match=r"extra_info\['solution'\] \(row 1\).*privileged_key"):
        _ext(tok)(step=0, teacher=_call(StandInWorkerGroup(model)), temperature=TEMP, **rows)


def test_teacher_chat_rewrites_only_the_last_user_message(tok):
    """verl's teacher chats come from grpolab's one builder (grpolab.rollout.teacher.teacher_messages)."""
    chat = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"},
            {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    seen = []
    ext = vc.CreditExtension(vc.VerlCreditConfig(name="rlsd", chat_template="{prompt} | {privileged} | {prompt}"),
                             tok, encode=lambda m: seen.append(m) or [1])
    ext.teacher_prompts([chat], [{"solution": "SOL"}], [0])
    assert seen[0][:3] == chat[:3] and seen[0][3] == {"role": "user", "content": "q2 | SOL | q2"}
    assert chat[3]["content"] == "q2"  # input untouched
    system = vc.CreditExtension(vc.VerlCreditConfig(name="rlsd", privileged_placement="system"), tok,
                                encode=lambda m: seen.append(m) or [1])
    system.teacher_prompts([chat], [{"solution": "SOL"}], [0])
    assert seen[1][0]["content"].startswith("be brief\n\nA reference solution") and seen[1][1:] == chat[1:]
    with pytest.raises(ValueError, match="row 0.*multimodal"):
        ext.teacher_prompts([[{"role": "user", "content": [{"type": "image"}]}]], [{"solution": "s"}], [0])
    with pytest.raises(ValueError, match="row 0.*needs a user message"):
        ext.teacher_prompts([[{"role": "system", "content": "x"}]], [{"solution": "s"}], [0])


@pytest.mark.parametrize("kw,match", [
    ({"name": "opsd"}, "rlsd, gear"),
    ({"teacher": "reference"}, "grpolab.credit.teacher='reference' is not allowed; choose one of: frozen, live"),
    ({"divergence": "kl"}, "logratio"),
    ({"teacher_sync_every": 10}, "initial policy"),
    ({"chunk_size": 64}, "not used inside verl"),
    ({"lam": 1.5}, "lam"),
    ({"eps_w": 1.0}, "eps_w"),
    ({"template": "{prompt} {privileged}"}, "chat_template"),
    ({"chat_template": "{prompt} only"}, "privileged"),
    ({"chat_template": "{prompt} {privileged} {answer}"}, "unknown fields"),
    ({"privileged_key": ""}, "privileged_key"),
])
def test_bad_config_is_refused_with_the_fix(kw, match):
    with pytest.raises(ValueError, match=match):
        vc.VerlCreditConfig(**{"name": "rlsd", **kw}).validate()


def test_config_from_verl_keys():
    cfg = verl_main.compose_config(None, "ppo_trainer", ["+grpolab.credit.name=gear",
                                                         "+grpolab.credit.privileged_key=worked",
                                                         "+grpolab.credit.lam=0.3"])
    c = vc.VerlCreditConfig.from_verl_config(cfg)
    assert (c.name, c.privileged_key, c.lam, c.teacher) == ("gear", "worked", 0.3, "frozen")
    assert vc.VerlCreditConfig.from_verl_config(verl_main.compose_config(None, "ppo_trainer", [])) is None
    no_credit = verl_main.compose_config(None, "ppo_trainer", ["+grpolab.credit.name=grpo"])
    assert vc.VerlCreditConfig.from_verl_config(no_credit) is None  # grpo: verl's plain trainer
    with pytest.raises(ValueError, match="no name: set \\+grpolab.credit.name=rlsd"):
        vc.VerlCreditConfig.from_verl_config(verl_main.compose_config(None, "ppo_trainer",
                                                                      ["+grpolab.credit.lam=0.3"]))
    with pytest.raises(ValueError, match="unknown credit key grpolab.credit.lamda; did you mean grpolab.credit.lam"):
        vc.VerlCreditConfig.from_mapping({"name": "rlsd", "lamda": 0.3})


# ------------------------------------------------------------------------------------------------
# the trainer extension inside verl's real v1 trainer


class FakeTQ:
    """In-memory TransferQueue: ``kv_batch_get`` / ``kv_batch_put`` over per-sample field dicts."""

    def __init__(self):
        self.store = {}

    def kv_batch_get(self, keys, partition_id, select_fields):
        return list_of_dict_to_tensordict([{f: self.store[k][f] for f in select_fields if f in self.store[k]}
                                           for k in keys])

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        for f in fields.keys():
            v = fields[f]
            vals = v.unbind() if isinstance(v, torch.Tensor) else list(v)
            for k, x in zip(keys, vals):
                self.store.setdefault(k, {})[f] = x
        from transfer_queue import KVBatchMeta
        return KVBatchMeta(partition_id=partition_id, keys=list(keys), tags=[{}] * len(keys))


_BASE: list = []


def _trainer(monkeypatch, overrides=None, **credit):
    """verl's real v1 sync trainer with the credit extension (no workers started)."""
    import copy

    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1 import PPOTrainerSync

    if not _BASE:  # compose verl's config once per module (Hydra's compose takes seconds)
        _BASE.append(verl_main.compose_config(None, "ppo_trainer", [
            "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={G}", "data.train_batch_size=3",
            f"actor_rollout_ref.rollout.temperature={TEMP}"]))
    config = copy.deepcopy(_BASE[0])
    for key, value in (overrides or {}).items():
        OmegaConf.update(config, key, value)
    cls = vc.credit_trainer_class(PPOTrainerSync,
                                  vc.VerlCreditConfig(**{"name": "rlsd", "chat_template": TEMPLATE, **credit}))
    return cls(config)


def test_compute_advantage_runs_verl_grpo_then_the_credit(tok, model, monkeypatch):
    """verl's own GRPO advantage computation, then the extension, through the TransferQueue calls."""
    import transfer_queue
    from transfer_queue import KVBatchMeta

    rows, adv_B = _rows(tok)
    fake = FakeTQ()
    monkeypatch.setattr(transfer_queue, "kv_batch_get", fake.kv_batch_get)
    monkeypatch.setattr(transfer_queue, "kv_batch_put", fake.kv_batch_put)
    B = len(adv_B)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    keys = [f"uid{i // G}_{i % G}_0" for i in range(B)]
    for i, k in enumerate(keys):
        n = int(rows["response_lengths"][i])
        rm = torch.zeros(n)
        rm[-1] = rewards[i]
        fake.store[k] = {"uid": f"uid{i // G}", "responses": rows["responses"][i, :n],
                         "response_mask": rows["response_mask"][i, :n], "rm_scores": rm,
                         "old_log_probs": rows["old_log_probs"][i, :n], "raw_prompt": rows["raw_prompts"][i],
                         "extra_info": rows["extra_infos"][i]}
    trainer = _trainer(monkeypatch, lam=0.5, lam_end=0.0, lam_steps=10)
    trainer.tokenizer = tok
    trainer.grpolab_extension = vc.CreditExtension(trainer.grpolab_credit, tok,
                                                   encode=vc.TeacherPromptEncoder(tok, hf_model_type="llama"))
    trainer.ref_policy_wg = StandInWorkerGroup(model, dp=2)
    trainer.actor_rollout_wg = StandInWorkerGroup(model)
    trainer.ref_in_actor = False
    trainer.global_steps = 3  # verl counts from 1: 0-based step 2, lam = 0.5 - 0.05 * 2 = 0.4
    metrics = {}
    trainer._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[{}] * B), metrics)
    got = torch.nn.utils.rnn.pad_sequence([fake.store[k]["advantages"] for k in keys], batch_first=True)
    T = rows["response_mask"].shape[1]
    got = torch.nn.functional.pad(got, (0, T - got.shape[1]))
    # verl's GRPO uses the unbiased std with eps 1e-6, as group_advantages does
    teacher = _expected_teacher_logp(tok, model, rows)
    ref = rlsd_advantages(adv_B, rows["old_log_probs"], teacher, rows["response_mask"], lam=0.4, eps_w=0.2)
    torch.testing.assert_close(got, ref.float(), rtol=1e-4, atol=1e-5)
    assert metrics["credit/lam"] == pytest.approx(0.4)
    assert [c["method"] for c in trainer.ref_policy_wg.calls] == ["compute_ref_log_prob"]
    assert trainer.actor_rollout_wg.calls == []


@pytest.mark.parametrize("teacher,ref_in_actor,wg,method,no_lora", [
    ("frozen", False, "ref", "compute_ref_log_prob", False),
    ("frozen", True, "actor", "compute_log_prob", True),
    ("live", False, "actor", "compute_log_prob", False),
])
def test_teacher_worker_follows_the_config(tok, model, monkeypatch, teacher, ref_in_actor, wg, method, no_lora):
    trainer = _trainer(monkeypatch, teacher=teacher)
    trainer.ref_policy_wg, trainer.actor_rollout_wg = object(), StandInWorkerGroup(model)
    if not ref_in_actor and teacher == "frozen":
        trainer.ref_policy_wg = StandInWorkerGroup(model)
    trainer.ref_in_actor = ref_in_actor
    call = trainer.grpolab_teacher_call()
    assert call.worker_group is (trainer.ref_policy_wg if wg == "ref" else trainer.actor_rollout_wg)
    assert (call.method, call.no_lora_adapter) == (method, no_lora)
    rows, _ = _rows(tok)
    _ext(tok)(step=0, teacher=call, temperature=TEMP, **rows)
    assert call.worker_group.calls[0]["method"] == method and call.worker_group.calls[0]["no_lora_adapter"] is no_lora


def test_live_teacher_follows_the_actor_frozen_teacher_does_not(tok, model):
    """teacher=live scores with the current actor weights; teacher=frozen with the initial ones."""
    import copy

    rows, _ = _rows(tok)
    actor = copy.deepcopy(model)
    ref_wg, actor_wg = StandInWorkerGroup(model), StandInWorkerGroup(actor)
    def live():
        call = _call(actor_wg, "compute_log_prob", "actor")
        return _ext(tok, teacher="live")(step=0, teacher=call, temperature=TEMP, **rows).teacher_logp

    def frozen():
        return _ext(tok)(step=0, teacher=_call(ref_wg), temperature=TEMP, **rows).teacher_logp

    before_live, before_frozen = live(), frozen()
    torch.testing.assert_close(before_live, before_frozen)
    with torch.no_grad():  # an "update" of the actor
        for p in actor.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert not torch.allclose(live(), before_live, atol=1e-4)
    torch.testing.assert_close(frozen(), before_frozen, rtol=0, atol=0)


def test_reference_worker_is_added_for_the_frozen_teacher(monkeypatch):
    from verl.trainer.ppo.utils import Role

    t = _trainer(monkeypatch, teacher="frozen")
    assert t.use_reference_policy and not t.grpolab_kl_uses_ref
    t._init_resource_pool_mgr()
    assert Role.ActorRolloutRef in t.role_worker_mapping and Role.ActorRollout not in t.role_worker_mapping
    assert t.resource_pool_manager.mapping[Role.ActorRolloutRef] == "global_pool"
    sentinel = object()
    assert t._compute_ref_log_prob(sentinel, {}) is sentinel  # no KL: no reference forward on the student prompt
    live = _trainer(monkeypatch, teacher="live")
    live._init_resource_pool_mgr()
    assert not live.use_reference_policy and Role.ActorRollout in live.role_worker_mapping
    kl = _trainer(monkeypatch, overrides={"actor_rollout_ref.actor.use_kl_loss": True}, teacher="frozen")
    assert kl.grpolab_kl_uses_ref  # with a KL loss verl's own reference forward still runs


def test_trainer_checks_the_privileged_text_of_verls_dataset(tok, tmp_path):
    """Without verl_main (run_ppo with the task runner), the trainer checks verl's real RLHFDataset
    in _init_dataloader, i.e. before _setup creates any worker group."""
    f = _parquet(tmp_path / "train.parquet", [{"solution": "s"}, {"index": 3}])
    t = _trainer(None, overrides={"data.train_files": f, "data.val_files": f, "data.train_batch_size": 1})
    t.tokenizer, t.processor = tok, None
    with pytest.raises(KeyError, match=r"extra_info\['solution'\] \(row 1\)"):
        t._init_dataloader()
    assert len(t.train_dataset) == 2  # verl's own dataset was built, then checked
    with pytest.raises(KeyError, match=r"extra_info\['index'\] \(row 0\) must be a non-empty string"):
        vc.check_dataset_privileged(t.train_dataset, "index")  # parquet fills a missing struct field with None
    g = _parquet(tmp_path / "good.parquet", [{"solution": "s"}, {"solution": "t"}])
    ok = _trainer(None, overrides={"data.train_files": g, "data.val_files": g, "data.train_batch_size": 1})
    ok.tokenizer, ok.processor = tok, None
    ok._init_dataloader()
    assert vc.check_dataset_privileged(ok.train_dataset, "solution") == 2


def test_task_runner_builds_the_credit_trainer(monkeypatch, tmp_path):
    """GrpolabTaskRunner.run is verl's TaskRunnerV1.run with the credit trainer swapped in."""
    import transfer_queue
    import verl.trainer.ppo.v1 as v1
    from verl.trainer.ppo.v1 import PPOTrainer

    from grpolab.integrations.verl.runner import GrpolabTaskRunner

    class Stop(Exception):
        pass

    def stop(self):
        raise Stop(type(self))

    monkeypatch.setattr(transfer_queue, "init", lambda *a, **k: None)
    monkeypatch.setattr(transfer_queue, "close", lambda *a, **k: None)
    monkeypatch.setattr(PPOTrainer, "init", stop)
    monkeypatch.setenv("HOME", str(tmp_path))
    base_lookup = v1.get_trainer_cls
    config = verl_main.compose_config(None, "ppo_trainer",
                                      ["+grpolab.credit.name=rlsd", "algorithm.adv_estimator=grpo"])
    with pytest.raises(Stop) as e:
        GrpolabTaskRunner().run(config)
    cls = e.value.args[0]
    assert issubclass(cls, vc.CreditTrainerMixin) and issubclass(cls, v1.PPOTrainerSync)
    assert cls.grpolab_credit.name == "rlsd"
    assert v1.get_trainer_cls is base_lookup  # the swap is undone
    plain = verl_main.compose_config(None, "ppo_trainer", ["algorithm.adv_estimator=grpo"])
    with pytest.raises(Stop) as e:
        GrpolabTaskRunner().run(plain)
    assert e.value.args[0] is v1.PPOTrainerSync  # no grpolab.credit section: verl's own trainer


# ------------------------------------------------------------------------------------------------
# the entry point: one clear message before any worker starts


def _no_run(monkeypatch):
    calls = []
    monkeypatch.setattr(verl_main, "run", lambda config, cfg: calls.append(cfg))
    return calls


@pytest.mark.parametrize("version,ok", [("0.9.1", True), ("0.9.4.dev0", True), ("0.9.0", False),
                                        ("0.8.5", False), ("0.10.0", False), ("1.0.0", False)])
def test_verl_version_check(version, ok):
    if ok:
        assert vc.check_verl_version(version) == version
    else:
        with pytest.raises(vc.VerlVersionError, match=r"verl>=0.9.1,<0.10.*found verl " + version.replace(".", r"\.")):
            vc.check_verl_version(version)


def test_wrong_verl_version_stops_the_command(monkeypatch, capsys):
    import importlib.metadata

    calls = _no_run(monkeypatch)
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.8.4" if name == "verl" else real(name))
    assert verl_main.main(["+grpolab.credit.name=rlsd"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "found verl 0.8.4" in err[0]
    assert calls == []


def _parquet(path, infos):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "q"}]] * len(infos), "extra_info": infos}), path)
    return str(path)


def test_missing_privileged_key_stops_the_command(monkeypatch, capsys, tmp_path):
    calls = _no_run(monkeypatch)
    f = _parquet(tmp_path / "train.parquet", [{"index": 0, "solution": "s"}, {"index": 1, "solution": ""},
                                               {"index": 2, "solution": "t"}])
    rc = verl_main.main([f"data.train_files={f}", "+grpolab.credit.name=rlsd"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "train.parquet" in err[0] and "(row 1)" in err[0] and calls == []
    g = _parquet(tmp_path / "other.parquet", [{"index": 0, "answer": "s"}])
    assert verl_main.main([f"data.train_files={g}", "+grpolab.credit.name=rlsd"]) == 2
    err = capsys.readouterr().err
    assert "extra_info['solution']" in err and "privileged_key" in err and calls == []
    # the right key: all checks pass and the run starts (here: the stand-in records it)
    assert verl_main.main([f"data.train_files={g}", "+grpolab.credit.name=rlsd",
                           "+grpolab.credit.privileged_key=answer"]) == 0
    assert [c.privileged_key for c in calls] == ["answer"]


def test_bad_credit_config_and_legacy_trainer_stop_the_command(monkeypatch, capsys, tmp_path):
    calls = _no_run(monkeypatch)
    f = _parquet(tmp_path / "train.parquet", [{"solution": "s"}])
    assert verl_main.main([f"data.train_files={f}", "+grpolab.credit.name=rlsd", "+grpolab.credit.divergence=kl"]) == 2
    assert "logratio" in capsys.readouterr().err
    assert verl_main.main([f"data.train_files={f}", "+grpolab.credit.name=rlsd", "trainer.use_v1=false"]) == 2
    assert "trainer.use_v1=true" in capsys.readouterr().err
    assert verl_main.main(["--bogus"]) == 2 and calls == []
    assert verl_main.main(["no_such_key=1"]) == 2 and "no_such_key" in capsys.readouterr().err  # Hydra's error


def test_rlsd_example_composes_and_passes_verl_validation(monkeypatch, tmp_path):
    """examples/verl's RLSD launch: the GRPO example's config + the script's grpolab.credit keys
    parse, and verl's validation passes with the reference worker counted (teacher=frozen)."""
    from pathlib import Path

    from omegaconf import OmegaConf
    from verl.utils.config import validate_config

    monkeypatch.setenv("HOME", str(tmp_path))
    here = Path(__file__).resolve().parents[3] / "examples" / "verl"
    script = (here / "run_rlsd_qwen2.5_math_1.5b.sh").read_text()
    keys = ["+grpolab.credit.privileged_key=solution", "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"]
    assert "python3 -m grpolab.integrations.verl.main" in script and "--config-name=grpolab_qwen2.5_math_1.5b" in script
    assert all(k in script for k in keys) and '+grpolab.credit.name="$CREDIT"' in script
    for name in ("rlsd", "gear"):
        cfg = verl_main.compose_config(str(here), "grpolab_qwen2.5_math_1.5b", [f"+grpolab.credit.name={name}", *keys])
        OmegaConf.resolve(cfg)
        c = vc.VerlCreditConfig.from_verl_config(cfg)
        assert (c.name, c.privileged_key, c.teacher, c.chat_template) == (name, "solution", "frozen", vc.DEFAULT_TEMPLATE)
        assert cfg.trainer.use_v1 and cfg.algorithm.adv_estimator == "grpolab_balanced"
        validate_config(cfg, use_reference_policy=True, use_critic=False)


@pytest.mark.slow  # a fresh interpreter importing verl: ~5 s on a quiet machine
def test_module_runs_as_a_command():
    """``python -m grpolab.integrations.verl.main`` exists and reports a bad option as one error line."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "grpolab.integrations.verl.main", "--no-such-flag"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith("error: unknown option '--no-such-flag'")
