"""grpolab.measure.readability.measure_error_readability / error_readability_row: the wiring from a
sampled batch and its teacher forward to :class:`ErrorReadability`."""

import json

import pytest
import torch

from grpolab.config import CreditConfig
from grpolab.models import build_tokenizer
from grpolab.rollout import Rollout
from grpolab.rollout.experience import Experience
from grpolab.tasks import TaskItem


def _exp(tok, texts, finished, rewards):
    item = TaskItem(prompt="7+5-3=", reference="9", demonstration="7+5=12;12-3=9#9", privileged="7+5=12;12-3=9#9")
    ids = [tok(t, add_special_tokens=False)["input_ids"] + ([tok.eos_token_id] if f else [])
           for t, f in zip(texts, finished)]
    L, B = max(map(len, ids)), len(ids)
    rid = torch.tensor([x + [0] * (L - len(x)) for x in ids])
    mask = torch.tensor([[1.0] * len(x) + [0.0] * (L - len(x)) for x in ids])
    r = Rollout(prompt_ids=torch.ones(B, 2, dtype=torch.long), prompt_mask=torch.ones(B, 2, dtype=torch.long),
                response_ids=rid, response_mask=mask, sample_logp=torch.zeros(B, L),
                group_ids=torch.zeros(B, dtype=torch.long), finished=torch.tensor(finished))
    return Experience(items=[item], rollout=r, texts=list(texts), rewards=torch.tensor(rewards))


def test_error_readability_row_reads_the_batch_by_hand():
    from grpolab.measure.readability import error_readability_row

    tok = build_tokenizer()  # one token per character
    texts = ["7+5=12;12-3=9#9", "7+5=13;13-3=10#10", "7+5=12;12-", "7+5=12;12-3=9#8"]
    exp = _exp(tok, texts, [True, True, False, True], [1.0, 0.0, 0.0, 0.0])
    delta = torch.zeros(4, exp.rollout.response_ids.shape[1])
    delta[1, 5] = -4.0  # the 3 of 13
    delta[3, 14] = -4.0  # the final 8
    delta[0, 2] = -3.0  # a drop inside the correct response: a GEAR segment to its end (no boundary in ';'-less
    res = error_readability_row(tok, exp, {"delta": delta, "kl": None}, CreditConfig(divergence="logratio",
                                                                                   gear_boundaries=""),
                                task="arith", n_boot=50)
    assert res.counts == {"error": 2, "reworded": 0, "verbatim": 1, "unlabelled": 1}
    assert res.error_kinds == {"equation": 1, "final": 1} and res.error_right_answer == 0
    assert res.auc_error_vs_reworded is None  # no reworded-correct response here
    assert res.auc_error_vs_correct.value == 1.0  # -4 at both errors, 0 or -3 on the correct tokens
    assert res.correct_tokens == 16 and res.error_tokens == 2  # 15 characters + EOS
    assert res.gear_departed_share_correct == pytest.approx(14 / 16)  # tokens 2..15 of row 0
    with pytest.raises(ValueError, match="needs the teacher forward's KL"):
        error_readability_row(tok, exp, {"delta": delta, "kl": None}, CreditConfig(), task="arith")


@pytest.mark.slow
def test_measure_error_readability_on_a_tiny_model(tmp_path):
    from grpolab.measure.readability import measure_error_readability, sample_responses
    from grpolab.models import TinyModelConfig, build_tiny_model, save_model
    from grpolab.runs import open_run

    tok = build_tokenizer()
    save_model(build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=64)), tok, tmp_path / "m")
    opened = open_run(tmp_path / "m", overrides=["rollout.max_new_tokens=8", "rollout.group_size=4",
                                                 "task.n_train=64"], train_items=True, log=lambda *_: None)
    T = opened.config.rollout.temperature
    exp = sample_responses(opened.collector, opened.model, opened.train_items[:3], group_size=4, temperature=T, seed=0)
    args = (opened.model, tok, opened.prompt_format, opened.config.credit, exp)
    res = measure_error_readability(*args, temperature=T, task="arith", n_boot=50)
    assert res.responses == 12 and sum(res.counts.values()) == 12
    for ci in (res.auc_error_vs_reworded, res.auc_error_vs_correct, res.auc_first_departure):
        assert ci is None or 0.0 <= ci.value <= 1.0
    assert res.gear_departed_share_correct is None or 0.0 <= res.gear_departed_share_correct <= 1.0
    again = measure_error_readability(*args, temperature=T, task="arith", n_boot=50)
    assert json.dumps(again.to_dict()) == json.dumps(res.to_dict())  # NaN bounds compare as text
    with pytest.raises(ValueError, match="no re-deriver for task 'reverse'"):
        measure_error_readability(*args, temperature=T, task="reverse")
