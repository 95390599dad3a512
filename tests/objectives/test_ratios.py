"""log_importance_ratio: values of the four levels and the stop-gradient structure.

docs/methods.md ("Importance ratios"): d_t = clamp(logp_t - old_t, -20, 20) * mask_t; token d_t, sequence sum d,
gspo (1/|o|) sum d, cumulative D_t = sum_{t'<=t} d_t'; log_ratio_t = sg(value_t) + logp_t - sg(logp_t)
so that d log_ratio_t / d logp_s = [s == t] * mask_t at every level.
"""

import pytest
import torch

from grpolab.objectives import log_importance_ratio

from .helpers import RATIO_LEVELS, make_batch, poison, t64
from .reference import ref_log_ratio_values

ATOL = 1e-10


@pytest.mark.parametrize("level", RATIO_LEVELS)
@pytest.mark.parametrize("seed", range(3))
def test_values_match_loop(level, seed):
    b = make_batch(seed, B=9, T=13, scale=0.7)
    got = log_importance_ratio(b["logp"], b["old"], b["mask"], level)
    assert got.shape == b["mask"].shape
    torch.testing.assert_close(got, t64(ref_log_ratio_values(b["logp"], b["old"], b["mask"], level)),
                               atol=ATOL, rtol=0)


def test_hand_case_all_levels():
    # one row, mask [1, 0, 1, 1, 0]; logp - old = [0.1, 9.0 (masked), -0.3, 30 (clamped to 20), 5]
    # token:      [0.1, 0, -0.3, 20, 0]
    # sequence:   sum = 0.1 - 0.3 + 20 = 19.8 at every valid position
    # gspo:       19.8 / 3 = 6.6
    # cumulative: [0.1, 0, 0.1-0.3=-0.2, -0.2+20=19.8, 0]
    old = t64([[0.0, 0.0, 0.0, -40.0, 0.0]])
    logp = t64([[0.1, 9.0, -0.3, -10.0, 5.0]])
    mask = t64([[1, 0, 1, 1, 0]])
    exp = {
        "token": [[0.1, 0, -0.3, 20.0, 0]],
        "sequence": [[19.8, 0, 19.8, 19.8, 0]],
        "gspo": [[6.6, 0, 6.6, 6.6, 0]],
        "cumulative": [[0.1, 0, -0.2, 19.8, 0]],
    }
    for level, rows in exp.items():
        torch.testing.assert_close(log_importance_ratio(logp, old, mask, level), t64(rows),
                                   atol=1e-12, rtol=0, msg=level)


@pytest.mark.parametrize("level", RATIO_LEVELS)
def test_jacobian_is_identity_on_mask(level):
    b = make_batch(5, B=4, T=7, scale=0.5)
    mask = b["mask"]
    J = torch.autograd.functional.jacobian(
        lambda lp: log_importance_ratio(lp, b["old"], mask, level), b["logp"])
    B, T = mask.shape
    exp = torch.diag(mask.reshape(-1)).reshape(B, T, B, T)
    assert torch.equal(J, exp), f"{level}: Jacobian is not diag(mask)"
    # and old_logp gets no gradient through the ratio only via value: not part of the contract


@pytest.mark.parametrize("level", RATIO_LEVELS)
@pytest.mark.parametrize("bad", [1e9, -1e9, float("nan"), float("inf")])
def test_poisoned_padding(level, bad):
    b = make_batch(8, B=6, T=9, scale=0.3)
    mask = b["mask"]
    clean = log_importance_ratio(b["logp"], b["old"], mask, level)
    lp = poison(b["logp"], mask, bad).requires_grad_(True)
    out = log_importance_ratio(lp, poison(b["old"], mask, -bad if bad == bad else bad), mask, level)
    assert torch.equal(out, clean)
    assert torch.equal(out[mask == 0], torch.zeros_like(out[mask == 0]))   # exactly 0
    out.sum().backward()
    assert torch.isfinite(lp.grad).all()
    assert torch.equal(lp.grad, mask)          # d(sum_t log_ratio_t)/d logp_s = mask_s


@pytest.mark.parametrize("level", RATIO_LEVELS)
def test_fully_masked_and_empty_rows(level):
    logp = t64([[-1.0, -2.0, -3.0], [-0.5, -0.1, -9.0]]).requires_grad_(True)
    old = t64([[-1.5, -2.5, -3.0], [-0.4, -0.1, -2.0]])
    mask = torch.zeros(2, 3, dtype=torch.float64)
    out = log_importance_ratio(logp, old, mask, level)
    assert torch.equal(out, torch.zeros(2, 3, dtype=torch.float64))
    out.sum().backward()
    assert torch.equal(logp.grad, torch.zeros(2, 3, dtype=torch.float64))


def test_level_relations():
    b = make_batch(13, B=10, T=17, scale=0.4)
    mask = b["mask"]
    tok = log_importance_ratio(b["logp"], b["old"], mask, "token")
    seq = log_importance_ratio(b["logp"], b["old"], mask, "sequence")
    gspo = log_importance_ratio(b["logp"], b["old"], mask, "gspo")
    cum = log_importance_ratio(b["logp"], b["old"], mask, "cumulative")
    # cumulative is the running sum of token values; at the last valid token it equals sequence
    torch.testing.assert_close(cum, torch.cumsum(tok, dim=1) * mask, atol=1e-12, rtol=0)
    lens = mask.sum(1)
    for i in range(mask.shape[0]):
        if lens[i] == 0:
            continue
        last = int(torch.nonzero(mask[i])[-1])
        assert abs(float(cum[i, last] - seq[i, last])) < 1e-12
        torch.testing.assert_close(gspo[i] * lens[i], seq[i], atol=1e-12, rtol=0)


def test_invalid_level_raises():
    b = make_batch(0, B=2, T=3)
    with pytest.raises((ValueError, KeyError)):
        log_importance_ratio(b["logp"], b["old"], b["mask"], "per-sentence")


def test_float32_close():
    b = make_batch(2, B=6, T=11, scale=0.5, dtype=torch.float32)
    for level in RATIO_LEVELS:
        got = log_importance_ratio(b["logp"], b["old"], b["mask"], level)
        assert got.dtype == torch.float32
        exp = t64(ref_log_ratio_values(b["logp"], b["old"], b["mask"], level))
        torch.testing.assert_close(got.double(), exp, atol=1e-5, rtol=1e-5)


def test_every_ratio_level_brings_its_clipping_rule():
    import torch

    from grpolab.objectives.ratios import RATIO_CLIPS, RATIO_LEVELS, clip_ratio

    assert sorted(RATIO_CLIPS.names()) == sorted(RATIO_LEVELS.names())
    # log ratios 0.1 at positions 1 and 4 (policy tokens); bounds 0.05 and 0.05 * sqrt(t) in log space
    lr = torch.tensor([[0.1, 0.0, 0.0, 0.1]], dtype=torch.float64)
    mask = torch.ones_like(lr)
    tok = clip_ratio("token", lr, mask, clip_low=0.2, clip_high=0.2, dual_clip=3.0)
    assert torch.equal(tok.high_hit_BT, torch.zeros_like(mask, dtype=torch.bool))   # e^0.1 = 1.105 < 1.2
    assert torch.equal(tok.dual_BT, torch.full_like(lr, 3.0))
    cum = clip_ratio("cumulative", lr, mask, clip_low=0.025, clip_high=0.05, clip_power=0.5)
    assert cum.high_hit_BT.tolist() == [[True, False, False, False]]   # 0.1 > 0.05 * 1, 0.1 <= 0.05 * 2
    assert torch.allclose(cum.clipped_BT[0, 0], torch.tensor(0.05, dtype=torch.float64).exp())
    assert torch.allclose(cum.dual_BT[0, 3], torch.tensor(0.1, dtype=torch.float64).exp())  # exp(0.05 * sqrt(4))
