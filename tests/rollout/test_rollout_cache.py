"""SlabLayer (pre-allocated KV slab) behaves like Hugging Face's growing DynamicLayer."""

import torch
from transformers.cache_utils import DynamicLayer

from grpolab.rollout.cache import ForwardSignature, SlabLayer, expand_to_slabs, new_cache, select_rows

from rollout_helpers import make_llama


def test_slab_matches_dynamic_layer_with_repeats_growth_and_selection():
    g = torch.Generator().manual_seed(0)
    k0, v0 = torch.randn(3, 2, 5, 4, generator=g), torch.randn(3, 2, 5, 4, generator=g)
    slab = SlabLayer(k0, v0, capacity=7, repeats=2)  # capacity 7: the 3rd update must grow the slab
    ref = DynamicLayer()
    ref.update(k0.repeat_interleave(2, 0), v0.repeat_interleave(2, 0))
    for _ in range(4):
        k, v = torch.randn(6, 2, 1, 4, generator=g), torch.randn(6, 2, 1, 4, generator=g)
        ks, vs = slab.update(k, v)
        kr, vr = ref.update(k, v)
        assert torch.equal(ks, kr) and torch.equal(vs, vr)
        assert slab.get_seq_length() == ref.get_seq_length()
        assert slab.get_mask_sizes(1) == (ref.get_seq_length() + 1, 0)
    idx = torch.tensor([5, 1, 2])
    slab.batch_select_indices(idx)
    ref.batch_select_indices(idx)
    k, v = torch.randn(3, 2, 1, 4, generator=g), torch.randn(3, 2, 1, 4, generator=g)
    ks, vs = slab.update(k, v)
    kr, vr = ref.update(k, v)
    assert torch.equal(ks, kr) and torch.equal(vs, vr)


def test_expand_to_slabs_swaps_full_attention_layers():
    model = make_llama(0)
    cache = new_cache(model)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    with torch.no_grad():
        model(input_ids=ids, use_cache=True, **{ForwardSignature.of(model).cache_kw: cache})
    before = [layer.keys.clone() for layer in cache.layers]
    expand_to_slabs(cache, capacity=10, repeats=3)
    assert all(isinstance(layer, SlabLayer) for layer in cache.layers)
    for layer, k in zip(cache.layers, before):
        assert torch.equal(layer.keys, k.repeat_interleave(3, 0))
        assert cache.get_seq_length() == 3
    select_rows(cache, torch.tensor([0, 4]))
    for layer, k in zip(cache.layers, before):
        assert torch.equal(layer.keys, k[[0, 1]])
