"""The preflight's numbers on a fixed synthetic input, pinned from the code before the refactor of issue 56
item 2 (commit 665d1ec, before the split): the split into stats / verdicts / pilot / report must leave
every number, verdict and ``--set`` line identical. A change here is a change of the preflight's output,
and must say why in its commit."""

import numpy as np
import pytest

from grpolab.diagnostics.preflight import (
    CUT,
    UNPARSED,
    WRONG,
    pilot_from_outcomes,
    preflight_from_outcomes,
    verdicts_from_counts,
)


def _case(seed=3, n=40, k=8, shift=0.0):
    """40 items x 8 samples at per-item solve rates from a Beta(0.6, 1.2), with failure reasons, answers
    seen in failed responses, lengths (failures 10 tokens longer), two families, a teacher readability
    row, privileged text and an off-policy run."""
    rng = np.random.default_rng(seed)
    p = np.clip(rng.beta(0.6, 1.2, n) + shift, 0, 1)
    S = (rng.random((n, k)) < p[:, None]).astype(float)
    g = (rng.random(n) < p).astype(float)
    reasons = [[None if x else (CUT if rng.random() < 0.4 else (WRONG if rng.random() < 0.7 else UNPARSED))
                for x in r] for r in S]
    seen = [[bool(rr is not None and rng.random() < 0.3) for rr in r] for r in reasons]
    L = [[float(rng.integers(5, 40)) + (10 if not x else 0) for x in r] for r in S]
    return dict(greedy_rewards=g.tolist(), sampled_rewards=S.tolist(), group_size=4, max_new_tokens=32,
                greedy_reasons=[None if x else WRONG for x in g], sampled_reasons=reasons,
                greedy_answer_seen=[False] * n, sampled_answer_seen=seen, sampled_lengths=L,
                families=["family=a" if i % 2 else "family=b" for i in range(n)],
                readability={"teacher_auc": 0.9, "response_auc": 0.8, "wrong_responses_localised": 40,
                             "tokens_before": 300},
                has_privileged=True, off_policy=True)


def _ci(d):
    return (d["value"], d["low"], d["high"], d["n"])


A = pytest.approx


def test_pinned_statistics():
    s = preflight_from_outcomes(**_case()).to_dict()["stats"]
    assert _ci(s["greedy"]) == A((0.4, 0.2634811061240136, 0.5540438017260649, 40))
    assert _ci(s["sampled"]) == A((0.303125, 0.21310004036404978, 0.3931499596359502, 40))
    assert _ci(s["pass_at_k"]) == A((0.8, 0.6524239261814333, 0.8950013502683314, 40))
    assert _ci(s["sample_solves"]) == A((0.4, 0.2634811061240136, 0.5540438017260649, 40))
    assert _ci(s["answer_in_failure"]) == A((0.2, 0.10499864973166874, 0.34757607381856676, 40))
    assert _ci(s["reachable"]) == A((0.6, 0.445956198273935, 0.7365188938759863, 40))
    assert _ci(s["all_equal"]) == A((0.4382142857142857, 0.30705075280944694, 0.6017117011155924, 40))
    assert _ci(s["mixed_items"]) == A((0.8, 0.6524239261814333, 0.8950013502683314, 40))
    assert _ci(s["response_tokens"]) == A((29.559375, 28.164920381011946, 30.953829618988053, 40))
    r = s["responses"]
    assert _ci(r["cut"]) == A((0.275, 0.1610785343314309, 0.4283525083312457, 40))
    assert _ci(r[CUT]) == A((0.39461883408071746, 0.3327724508440264, 0.46003451225268954, 223))
    assert _ci(r["answer_in_cut_response"]) == A((0.26136363636363635, 0.18093113139383873, 0.3617597624930273, 88))
    lc = s["length_coupling"]
    assert lc["fail_success_length_ratio"] == A(1.6390436781609192)
    assert lc["ratio_ci"] == A([1.4104409696565545, 1.9171354894614439])


def test_pinned_verdicts_and_set_lines():
    res = preflight_from_outcomes(**_case()).to_dict()
    rows = {m["method"]: (m["verdict"], m["rests_on"], m["set_lines"]) for m in res["methods"]}
    assert rows == {
        "GRPO": ("indicated", "reachable 60.0% [44.6, 73.7] (n=40): a sample solves 40.0%, the answer is in a "
                 "failed response 20.0%; greedy 0.400, pass@8 0.800; groups with signal possible on 80% of items",
                 ["(none needed: GRPO is the default objective)"]),
        "dynamic sampling": ("indicated", "all-equal groups at G=4: 43.8% [30.7, 60.2] (n=40)",
                             ["rollout.dynamic_sampling=true", "rollout.dynamic_sampling_rounds=4",
                              "rollout.dynamic_sampling_oversample=1.8"]),
        "overlong shaping / truncation masking": (
            "indicated", "responses cut at the 32-token cap: 27.5% [16.1, 42.8] (n=40); the answer is already in "
            "26% of the cut ones", ["rollout.max_new_tokens=64", "objective.overlong_buffer=8"]),
        # changed on purpose (issue 60 item 1): the first-departure AUC alone no longer decides RLSD/GEAR, since a
        # copier of the reference passes it by construction; this row has no re-derived error AUC
        "RLSD / GEAR": ("can't tell", "first-departure AUC 0.900 (tests copying, not errors)", []),
        "Balanced Aggregation": ("indicated", "ratio 1.639 [1.410, 1.917] over 32 mixed groups (320 responses)",
                                 ["objective.aggregation=balanced"]),
        "CTPO / GSPO": ("not indicated", "mean response 29.6 tokens [28.2, 31.0]; off-policy (several optimizer "
                        "steps per batch or a policy lag)", []),
    }
    assert {k: (v["verdict"], v["reachable"]["value"]) for k, v in res["families"].items()} == {
        "family=a": ("indicated", A(0.55)), "family=b": ("indicated", A(0.65))}


def test_pinned_counts_verdict():
    v = verdicts_from_counts(128, 46, 96, k=8)
    assert v["grpo"] == "indicated" and v["reachable"] == A(0.390625)
    assert v["reachable_ci"] == A([0.3104688157120751, 0.47715512089063605])


def test_pinned_pilot_change():
    before, after = preflight_from_outcomes(**_case()), preflight_from_outcomes(**_case(shift=0.15))
    p = pilot_from_outcomes(before, after, steps=3).to_dict()  # preflight.json's pilot
    assert p["verdict"] == "indicated"
    assert (p["sampled"]["before"], p["sampled"]["after"]) == A((0.303125, 0.46875))
    assert _ci(p["sampled"]["change"]) == A((0.165625, 0.12787553438801366, 0.20337446561198633, 40))
    assert _ci(p["greedy"]["change"]) == A((0.125, 0.017883529447526123, 0.23211647055247386, 40))


def test_verdicts_recomputed_from_a_stored_preflight_json_are_the_same():
    # the calibration recomputes verdicts from preflight.json's stats (method_table on a dict)
    import json

    from grpolab.diagnostics.preflight import method_table

    res = preflight_from_outcomes(**_case())
    stored = json.loads(json.dumps(res.to_dict()))["stats"]
    again = method_table(stored)
    assert [(m.id, m.verdict, m.rests_on, m.set_lines, m.note) for m in again] == \
        [(m.id, m.verdict, m.rests_on, m.set_lines, m.note) for m in res.methods]
