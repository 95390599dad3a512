"""grpolab.bench.timing: the sampler and HF generate draw the same number of tokens, and are timed."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpolab.bench.timing import TIMING_QUESTIONS, time_hf_generate, time_sample, timing_prompts

PAD = 0


@pytest.fixture(scope="module")
def llama():
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def test_both_sides_generate_exactly_T_tokens_per_row(llama):
    prompts = [[1, 5, 6, 7], [1, 8]]
    assert time_sample(llama, prompts, 2, 3, PAD, 0) > 0          # asserts G x T tokens per prompt inside
    assert time_hf_generate(llama, prompts, 2, 3, PAD, 0) > 0


def test_timing_prompts_cycle_through_the_questions():
    from grpolab.models import build_tokenizer

    import string

    tok = build_tokenizer(alphabet=string.printable.replace("<", "").replace(">", ""))
    prompts = timing_prompts(tok, len(TIMING_QUESTIONS) + 1)
    assert len(prompts) == len(TIMING_QUESTIONS) + 1 and prompts[0] == prompts[-1] and prompts[0] != prompts[1]
