"""The precondition measurements of issue 16 (benchmarks/experiments/credit.py signal, benchmarks/experiments/preconditions.py),
against hand-computed cases."""

import importlib.util
from pathlib import Path

import pytest
import torch

from grpolab.models import build_tokenizer
from grpolab.tasks import TaskItem

_ROOT = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", _ROOT / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


credit = _load("credit")
preconditions = _load("preconditions")


def _enc(tok, text):
    return list(tok(text, add_special_tokens=False)["input_ids"])


def test_first_wrong_token_against_hand_cases():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    ref = "7+5=12;12-3=9#9"
    assert credit.first_wrong_token(tok, _enc(tok, ref) + [eos], ref) is None  # exactly the solution
    assert credit.first_wrong_token(tok, _enc(tok, "7+5=13;13-3=10#10") + [eos], ref) == 5  # the '3' of 13
    assert credit.first_wrong_token(tok, _enc(tok, "7+5=12") + [eos], ref) == 6  # stops early: EOS is wrong
    assert credit.first_wrong_token(tok, _enc(tok, ref + "9") + [eos], ref) == len(ref)  # runs on


def test_localisation_means_before_at_and_after():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    item = TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3", privileged="1+2=3#3")
    rows = [_enc(tok, "1+2=4#4") + [eos], _enc(tok, "1+2=3#3") + [eos]]
    T = max(len(r) for r in rows)
    ids = torch.tensor([r + [0] * (T - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (T - len(r)) for r in rows])
    delta = torch.zeros(2, T)
    delta[0, :4] = 1.0      # before the first wrong token (index 4, the '4')
    delta[0, 4] = -3.0      # at it
    delta[0, 5:8] = -1.0    # after it: '#', '4', EOS
    delta[1] = 7.0          # a correct row: ignored
    res = credit.localisation(tok, ids, mask, delta, [item], 2, torch.tensor([True, False]))
    assert res["wrong_responses_localised"] == 1 and res["tokens_before"] == 4
    assert res["delta_before_first_wrong"] == pytest.approx(1.0)
    assert res["delta_at_first_wrong"] == pytest.approx(-3.0)
    assert res["delta_after_first_wrong"] == pytest.approx(-1.0)
    assert res["frac_at_below_before_mean"] == 1.0


def test_auc_hand_values():
    assert credit._auc([2.0, 3.0], [1.0]) == 1.0
    assert credit._auc([1.0], [1.0, 2.0]) == pytest.approx(0.25)  # a tie counts half, a loss 0


def test_length_coupling_is_within_groups():
    # group 1 (mixed): failures 20 and 10 (mean 15), successes 10 and 10 (mean 10)
    # group 2 (all correct): ignored by the within-group ratio, used by the pooled one
    lengths = [10, 20, 10, 10, 5, 5, 5, 5]
    correct = [True, False, True, False, True, True, True, True]
    res = preconditions.length_coupling(lengths, correct, 4)
    assert res["mixed_groups"] == 1
    assert res["fail_success_length_ratio"] == pytest.approx(15 / 10)
    # pooled: failures mean 15, successes (10+10+5*4)/6
    assert res["pooled_fail_success_ratio"] == pytest.approx(15 / (40 / 6))
    assert res["mean_response_tokens"] == pytest.approx(70 / 8)
    assert res["fail_longer_frac"] == 0.5 and res["fail_shorter_frac"] == 0.0  # 20 > 10, 10 == 10
    none = preconditions.length_coupling([5, 6], [True, True], 2)
    assert none["fail_success_length_ratio"] is None and none["mixed_groups"] == 0


def test_length_coupling_pinned_hand_example():
    # groups of 3 (the last one cut short, 2 rows); S = success, F = failure
    # g0: S4  F8  F12 -> mixed: fail mean 10, success mean 4, ratio 2.5; 8, 12 > 4: 2 longer
    # g1: S6  S6  S6  -> all right, not mixed
    # g2: F9  F3  F30 -> all wrong, not mixed
    # g3: S10 S20 F5  -> mixed: fail 5, success 15, ratio 1/3; 5 < 15: 1 shorter
    # g4: F7  S7  F1  -> mixed: fail 4, success 7, ratio 4/7; 7 == 7 neither, 1 < 7: 1 shorter
    # g5: S2  F3      -> mixed: fail 3, success 2, ratio 1.5; 3 > 2: 1 longer
    # within groups: fail means 10, 5, 4, 3 -> 22/4 = 5.5; success means 4, 15, 7, 2 -> 28/4 = 7
    # ratio of means 5.5 / 7 = 11/14; mean of ratios (2.5 + 1/3 + 4/7 + 1.5) / 4 = (103/21) / 4 = 103/84
    # failures in mixed groups: 2 + 1 + 2 + 1 = 6; longer 2 + 1 = 3, shorter 1 + 1 = 2
    # pooled: failures 8+12+9+3+30+5+7+1+3 = 78 over 9, successes 4+6+6+6+10+20+7+2 = 61 over 8
    #   -> (78/9) / (61/8) = 208/183; all 139 tokens over 17 responses; 8 of 17 correct
    lengths = [4, 8, 12, 6, 6, 6, 9, 3, 30, 10, 20, 5, 7, 7, 1, 2, 3]
    correct = [True, False, False, True, True, True, False, False, False, True, True, False,
               False, True, False, True, False]
    res = preconditions.length_coupling([float(x) for x in lengths], correct, 3)
    exact = pytest.approx
    assert res == {
        "responses": 17, "correct_frac": exact(8 / 17, rel=1e-12), "mixed_groups": 4,
        "fail_success_length_ratio": exact(11 / 14, rel=1e-12), "mean_group_ratio": exact(103 / 84, rel=1e-12),
        "mean_fail_tokens_mixed": exact(5.5, rel=1e-12), "mean_success_tokens_mixed": exact(7.0, rel=1e-12),
        "pooled_fail_success_ratio": exact(208 / 183, rel=1e-12), "mean_response_tokens": exact(139 / 17, rel=1e-12),
        "fail_longer_frac": exact(3 / 6, rel=1e-12), "fail_shorter_frac": exact(2 / 6, rel=1e-12),
    }
    # no group mixed (one all right, one all wrong): the within-group fields are None, the pooled one is not
    # pooled: failures 9 over 1, successes 3+5 = 8 over 2 -> 9 / 4; 17 tokens over 3 responses
    none = preconditions.length_coupling([3.0, 5.0, 9.0], [True, True, False], 2)
    assert none == {
        "responses": 3, "correct_frac": exact(2 / 3, rel=1e-12), "mixed_groups": 0,
        "fail_success_length_ratio": None, "mean_group_ratio": None,
        "mean_fail_tokens_mixed": None, "mean_success_tokens_mixed": None,
        "pooled_fail_success_ratio": exact(9 / 4, rel=1e-12), "mean_response_tokens": exact(17 / 3, rel=1e-12),
        "fail_longer_frac": None, "fail_shorter_frac": None,
    }


def _signal_result(ws, auc, template="config"):
    return {"warm_start": ws, "rows": [{"template": template, "auc_sum_delta": auc, "correct_frac": 0.5,
                                        "auc_mean_delta": None if auc is None else auc - 0.1,
                                        "delta_before_first_wrong": 0.0, "delta_at_first_wrong": -1.0,
                                        "clip_frac_eps_0.2": 0.1}]}


def test_choose_warm_start_by_the_teacher_signal():
    # in the order given (by step): the first to reach the bound, and the best; undefined AUCs skipped
    res = [_signal_result("s50", 0.51), _signal_result("s100", None), _signal_result("s150", 0.805),
           _signal_result("s200", 0.957), _signal_result("s250", 0.737)]
    assert credit.choose_warm_start(res, "config", 0.8) == {"first_meeting": "s150", "best": "s200", "best_auc": 0.957}
    assert credit.choose_warm_start(res, "config", 0.96)["first_meeting"] is None
    assert credit.choose_warm_start(res[:2], "config", 0.8) == {"first_meeting": None, "best": "s50", "best_auc": 0.51}
    by_mean = credit.choose_warm_start(res, "config", 0.8, key="auc_mean_delta")  # 0.705 at s150: not yet
    assert by_mean == {"first_meeting": "s200", "best": "s200", "best_auc": pytest.approx(0.857)}
    assert credit.choose_warm_start([_signal_result("a", None)], "config", 0.8)["best"] is None
    assert credit.choose_warm_start([_signal_result("a", 0.9, "compact")], "config", 0.8)["best"] is None


def test_signal_over_several_warm_starts_writes_the_choice(tmp_path, monkeypatch, capsys):
    import argparse
    import json

    aucs = {"w1": 0.6, "w2": 0.85, "w3": 0.9}
    monkeypatch.setattr(credit, "measure_signal", lambda ws, args: {"group_size": 8, **_signal_result(ws, aucs[ws])})
    args = argparse.Namespace(warm_start=None, warm_starts=["w1", "w2", "w3"], prompts=4, seed=0, set=[],
                              templates=["config"], min_auc=0.8, auc_of="sum", out=str(tmp_path / "sig.json"))
    credit.signal(args)
    doc = json.loads((tmp_path / "sig.json").read_text())
    assert (doc["first_meeting"], doc["best"], doc["best_auc"], doc["min_auc"]) == ("w2", "w3", 0.9, 0.8)
    assert [r["warm_start"] for r in doc["by_warm_start"]] == ["w1", "w2", "w3"]
    out = capsys.readouterr().out
    assert "| w2 | 0.500 | 0.850 [0.750] |" in out and "first to reach the AUC bound: w2; best: w3 (0.900)" in out


def test_measure_signal_on_a_tiny_model(tmp_path):
    import argparse

    from grpolab.models import TinyModelConfig, build_tiny_model, save_model

    tok = build_tokenizer()
    save_model(build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=64)), tok, tmp_path / "m")
    args = argparse.Namespace(prompts=2, seed=0, config=None, templates=["compact", "config"],
                              set=["rollout.max_new_tokens=8", "rollout.group_size=4", "task.n_train=64"])
    res = credit.measure_signal(tmp_path / "m", args)
    assert res["group_size"] == 4 and [r["template"] for r in res["rows"]] == ["compact", "config"]
    assert all(r["responses"] == 8 and 0 <= r["correct_frac"] <= 1 and r["mean_kl"] >= 0 for r in res["rows"])


def test_first_wrong_token_follows_the_accepted_answer_it_started():
    # final_line accepts "N", "Answer: N" and the question's own "A + B = N": the response departs
    # where it leaves the one it follows longest (a right sum that runs on departs after the number)
    tok = build_tokenizer()
    eos = tok.eos_token_id
    item = TaskItem(prompt="what is 3 + 15?", reference="18", demonstration="18", reward="final_line",
                    reward_options={"expression": "3 + 15"})
    targets = credit.accepted_targets(item)
    assert targets == ["18", "Answer: 18", "3 + 15 = 18"]
    ok = "3 + 15 = 18"
    assert credit.first_wrong_token(tok, _enc(tok, ok) + [eos], targets) is None
    assert credit.first_wrong_token(tok, _enc(tok, "18") + [eos], targets) is None
    assert credit.first_wrong_token(tok, _enc(tok, ok + "\nin") + [eos], targets) == len(ok)  # runs on
    assert credit.first_wrong_token(tok, _enc(tok, "3 + 15 = 17") + [eos], targets) == len("3 + 15 = 1")
    assert credit.first_wrong_token(tok, _enc(tok, "17") + [eos], targets) == 1            # '1' fits "18" / "15"
    assert credit.first_wrong_token(tok, _enc(tok, "3 + 15") + [eos], targets) == len("3 + 15")  # stops early
    assert credit.first_wrong_token(tok, _enc(tok, "3 + 15 ="), targets) is None  # cut before it departs
    plain = TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3")
    assert credit.accepted_targets(plain) == ["1+2=3#3"]


def test_first_wrong_token_auc_is_token_level_mann_whitney():
    tok = build_tokenizer()
    eos = tok.eos_token_id
    item = TaskItem(prompt="1+2=", reference="3", demonstration="1+2=3#3", privileged="1+2=3#3")
    rows = [_enc(tok, "1+2=4#4") + [eos], _enc(tok, "1+5=3#3") + [eos]]  # first wrong at 4 and at 2
    ids = torch.tensor(rows)
    mask = torch.ones_like(ids)
    delta = torch.zeros(ids.shape)
    delta[0, :4] = torch.tensor([0.0, 1.0, 2.0, 3.0])
    delta[0, 4] = 0.5
    delta[1, :2] = torch.tensor([-1.0, 4.0])
    delta[1, 2] = 1.0
    res = credit.localisation(tok, ids, mask, delta, [item], 2, torch.tensor([True, True]))
    # before = [0, 1, 2, 3, -1, 4], at = [0.5, 1.0]: wins over 0.5: 4 of 6; over 1.0: 3 of 6 + a tie (half)
    assert res["auc_first_wrong"] == pytest.approx((4 + 3.5) / 12)
    assert res["tokens_before"] == 6 and res["wrong_responses_localised"] == 2


def test_measure_signal_on_a_chat_model_uses_the_trainers_teacher_prompts(tmp_path):
    # a chat-template run: sampled through the chat template, and each variant's teacher prompt is
    # the one the trainer's credit step builds (privileged context in the user turn or system message)
    import argparse

    from chat_helpers import make_chat_model_dir, write_gsm8k_jsonl

    model_dir = make_chat_model_dir(tmp_path / "tiny-chat")
    data = write_gsm8k_jsonl(tmp_path / "gsm8k.jsonl", 40)
    cfg = Path(__file__).resolve().parents[2] / "examples" / "chat_gsm8k.yaml"
    args = argparse.Namespace(prompts=2, seed=0, config=str(cfg), templates=["user", "system", "user_bare"],
                              set=[f"task.options.path={data}", "rollout.max_new_tokens=6", "rollout.group_size=4",
                                   "model.lora={}"])
    res = credit.measure_signal(model_dir, args)
    assert res["prompt_format"] == "on"
    rows = {r["template"]: r for r in res["rows"]}
    assert [rows[k]["placement"] for k in ("user", "system", "user_bare")] == ["user", "system", "user"]
    assert all(r["responses"] == 8 and r["mean_kl"] >= 0 for r in rows.values())
    user, system, bare = (rows[k]["template_text"] for k in ("user", "system", "user_bare"))
    assert "<|im_start|>user" in user and "Here is a reference solution:" in user
    assert "<|im_start|>system" in system and "A reference solution" in system.split("<|im_start|>user")[0]
    assert "Here is a reference solution" not in bare and "<|im_start|>user" in bare
