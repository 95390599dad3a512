"""Write a tiny llama GGUF file (and the HF model it holds) for tests: no downloads, ~100 KB.

The file is written with the ``gguf`` package's own writer, the way llama.cpp's converter lays a
llama model out: GGUF metadata names (``llama.*``, ``tokenizer.ggml.*``), tensors named
``blk.N.attn_q.weight`` ..., tied embeddings (no ``output.weight``), a byte-level BPE vocabulary
with three ChatML special tokens, and a chat template. Query and key weights are stored with each
head's rows regrouped into llama.cpp's interleaved rotary order (pairs ``(2i, 2i+1)`` instead of
Hugging Face's ``(i, i + d/2)``), which a reader must undo: the HF model built here is the truth
the loaded one is compared against.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1 (bos), 2 (eos and pad), as SmolLM2


def _byte_tokens() -> list[str]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def build_tiny_llama(seed: int = 0):
    """A random 2-layer LlamaForCausalLM (GQA: 4 query heads, 2 key/value heads) over the vocabulary below."""
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = len(SPECIALS) + 256 + 1  # + one merged token
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                      bos_token_id=1, eos_token_id=2, pad_token_id=2)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norms, so a mix-up of norm tensors shows
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def _to_ggml_rope_order(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Rows of each head reordered from HF's half-split rotary layout to llama.cpp's interleaved one."""
    out_dim, in_dim = w.shape
    d = out_dim // n_heads
    return w.reshape(n_heads, 2, d // 2, in_dim).transpose(1, 2).reshape(out_dim, in_dim)


def write_tiny_gguf(path, model=None, *, name: str = "Tiny Llama Test", chat_template: str | None = CHATML) -> Path:
    """Write ``model`` (default :func:`build_tiny_llama`) as an F32 GGUF at ``path``; returns the path."""
    import gguf

    model = model if model is not None else build_tiny_llama()
    cfg = model.config
    path = Path(path)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None)
                         else float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    tokens = SPECIALS + _byte_tokens() + ["Ġt"]
    assert len(tokens) == cfg.vocab_size
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS)))  # 3 = control, 1 = normal
    w.add_token_merges(["Ġ t"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    if chat_template:
        w.add_chat_template(chat_template)
    sd = {k: v.detach().float() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"].numpy())
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        q = _to_ggml_rope_order(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads)
        k = _to_ggml_rope_order(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads)
        for gname, t in (("attn_norm", sd[p + "input_layernorm.weight"]), ("attn_q", q), ("attn_k", k),
                         ("attn_v", sd[p + "self_attn.v_proj.weight"]),
                         ("attn_output", sd[p + "self_attn.o_proj.weight"]),
                         ("ffn_norm", sd[p + "post_attention_layernorm.weight"]),
                         ("ffn_gate", sd[p + "mlp.gate_proj.weight"]), ("ffn_up", sd[p + "mlp.up_proj.weight"]),
                         ("ffn_down", sd[p + "mlp.down_proj.weight"])):
            w.add_tensor(f"blk.{i}.{gname}.weight", np.ascontiguousarray(t.numpy()))
    w.add_tensor("output_norm.weight", sd["model.norm.weight"].numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
