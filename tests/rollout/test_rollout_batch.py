"""Rollout dataclass helpers and left_pad."""

import pytest
import torch

from grpolab.rollout import Rollout, left_pad


def _toy() -> Rollout:
    return Rollout(
        prompt_ids=torch.tensor([[0, 5, 6], [7, 8, 9], [0, 0, 4]]),
        prompt_mask=torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1]]),
        response_ids=torch.tensor([[11, 2, 0, 0], [12, 13, 14, 15], [2, 0, 0, 0]]),
        response_mask=torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]),
        sample_logp=torch.tensor([[-0.1, -0.2, 0, 0], [-1, -2, -3, -4], [-0.5, 0, 0, 0]]),
        group_ids=torch.tensor([0, 0, 1]),
        finished=torch.tensor([True, False, True]),
    )


def test_concatenated_views_and_lengths():
    r = _toy()
    assert r.input_ids.tolist()[0] == [0, 5, 6, 11, 2, 0, 0]
    assert r.attention_mask.tolist()[2] == [0, 0, 1, 1, 0, 0, 0]
    assert r.attention_mask.dtype == torch.long
    assert r.response_lengths.tolist() == [2, 4, 1]
    assert len(r) == r.batch_size == 3


@pytest.mark.parametrize("index", [torch.tensor([2, 0]), [2, 0], torch.tensor([True, False, True])])
def test_select(index):
    r = _toy()
    s = r.select(index)
    rows = [2, 0] if not (isinstance(index, torch.Tensor) and index.dtype == torch.bool) else [0, 2]
    assert s.prompt_ids.tolist() == [r.prompt_ids[i].tolist() for i in rows]
    assert s.sample_logp.tolist() == [r.sample_logp[i].tolist() for i in rows]
    assert s.group_ids.tolist() == [r.group_ids[i].item() for i in rows]
    assert s.finished.tolist() == [r.finished[i].item() for i in rows]
    sl = r.select(slice(1, 3))
    assert sl.response_ids.tolist() == r.response_ids[1:3].tolist()
    assert r.select(1).batch_size == 1


def test_to_and_validation():
    r = _toy().to("cpu")
    assert r.prompt_ids.device.type == "cpu"
    with pytest.raises(ValueError, match="rows"):
        Rollout(**{**_toy().__dict__, "group_ids": torch.tensor([0, 1])})
    with pytest.raises(ValueError, match="sample_logp"):
        Rollout(**{**_toy().__dict__, "sample_logp": torch.zeros(3, 5)})


def test_left_pad_matches_loop():
    prompts = [[3], [4, 5, 6], [7, 8]]
    ids, mask = left_pad(prompts, pad_token_id=9)
    for b, p in enumerate(prompts):  # loop reference
        expect = [9] * (3 - len(p)) + p
        assert ids[b].tolist() == expect
        assert mask[b].tolist() == [0] * (3 - len(p)) + [1] * len(p)
    with pytest.raises(ValueError):
        left_pad([], 0)
