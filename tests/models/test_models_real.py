"""Loading a local Qwen2-shaped instruct model as users expect (dtype auto, eos list, attention
implementation, gradient checkpointing) and LoRA adapters through peft."""

import pytest
import torch
from chat_helpers import build_chat_model, build_chat_tokenizer, make_chat_model_dir

from grpolab.models import load_model
from grpolab.models.io import stop_token_ids
from grpolab.models.lora import (AdaptersOff, LoraSettings, adapters_disabled, apply_lora, has_lora, merged_copy,
                                 parameter_counts, save_adapter)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def test_dtype_auto_keeps_a_bf16_checkpoint_bf16(tmp_path):
    d = make_chat_model_dir(tmp_path / "m", dtype="bfloat16")
    model, _ = load_model(d)  # default: auto
    assert next(model.parameters()).dtype == torch.bfloat16
    model32, _ = load_model(d, dtype="float32")
    assert next(model32.parameters()).dtype == torch.float32


def test_default_config_keeps_a_bf16_checkpoint_bf16(tmp_path):
    from grpolab.config import load_config
    from grpolab.train.setup import build_policy

    d = make_chat_model_dir(tmp_path / "m", dtype="bfloat16")
    cfg = load_config(overrides=[f"model.path={d}"])
    assert cfg.model.dtype == "auto"
    model, _, _ = build_policy(cfg.model, seed=0, device=torch.device("cpu"))
    assert next(model.parameters()).dtype == torch.bfloat16


def test_stop_tokens_include_generation_config_list(tmp_path):
    model, tok = load_model(make_chat_model_dir(tmp_path / "m"))
    im_end, eot = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    assert tok.eos_token_id == eot  # the tokenizer alone would never stop at <|im_end|>
    assert stop_token_ids(model, tok) == [eot, im_end]


def test_attn_implementation_is_passed_through_and_bad_names_are_named(tmp_path):
    d = make_chat_model_dir(tmp_path / "m")
    model, _ = load_model(d, attn_implementation="eager")
    assert model.config._attn_implementation == "eager"
    with pytest.raises(ValueError, match="attn_implementation='nonsense'"):
        load_model(d, attn_implementation="nonsense")


def test_gradient_checkpointing_same_gradients(tmp_path):
    d = make_chat_model_dir(tmp_path / "m")
    ids = torch.randint(3, 300, (2, 12))
    grads = []
    for ckpt in (False, True):
        model, _ = load_model(d, gradient_checkpointing=ckpt)
        model.train()
        assert getattr(model, 'is_activation_checkpointing', model.is_gradient_checkpointing) == ckpt
        model(input_ids=ids).logits.float().logsumexp(-1).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-5)


@pytest.fixture
def lora_model():
    tok = build_chat_tokenizer()
    return build_chat_model(tok, hidden=64, layers=2, intermediate=128), tok


def test_lora_trains_few_parameters_and_keeps_the_base_reachable(lora_model):
    model, _ = lora_model
    ids = torch.randint(3, 300, (2, 10))
    base = _logits(model, ids)
    n_full = parameter_counts(model)[1]
    apply_lora(model, {"r": 2, "alpha": 4})
    assert has_lora(model)
    trainable, total = parameter_counts(model)
    assert trainable / n_full < 0.05 and total > n_full
    assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())
    # B starts at 0: the adapted model equals the base; move B so they differ
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    adapted = _logits(model, ids)
    assert not torch.allclose(adapted, base, atol=1e-3)
    with adapters_disabled(model):
        assert torch.allclose(_logits(model, ids), base, atol=1e-6)
    assert torch.allclose(_logits(model, ids), adapted)                  # back on afterwards
    assert all(("lora_" in n) == p.requires_grad for n, p in model.named_parameters())
    view = AdaptersOff(model)
    assert torch.allclose(_logits(view, ids), base, atol=1e-6)           # the teacher/reference view
    assert view.state_dict() == {} and next(view.parameters()) is next(model.parameters())
    merged = merged_copy(model)
    assert not has_lora(merged) and torch.allclose(_logits(merged, ids), adapted, atol=1e-5)


def test_saved_adapter_loads_with_peft(lora_model, tmp_path):
    from peft import PeftModel

    model, tok = lora_model
    base_dir = tmp_path / "base"
    model.save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    apply_lora(model, LoraSettings(r=4, alpha=8, target_modules=("q_proj", "v_proj")))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    ids = torch.randint(3, 300, (2, 10))
    want = _logits(model, ids)
    out = save_adapter(model, tmp_path / "adapter", base_model=str(base_dir))
    assert (out / "adapter_model.safetensors").exists() and (out / "adapter_config.json").exists()
    base, _ = load_model(base_dir)
    peft_model = PeftModel.from_pretrained(base, str(out))
    assert torch.allclose(_logits(peft_model, ids), want, atol=1e-5)


def test_lora_settings_are_validated(lora_model):
    with pytest.raises(ValueError, match="unknown LoRA keys"):
        LoraSettings.from_dict({"rank": 8})
    with pytest.raises(ValueError, match="r=0"):
        LoraSettings.from_dict({"r": 0})
    model, _ = lora_model
    with pytest.raises(ValueError, match="linear layers are named"):
        apply_lora(model, {"target_modules": ["nope_proj"]})


def test_an_adapter_directory_loads_as_its_base_with_the_adapter_merged(lora_model, tmp_path, monkeypatch):
    # model.lora_save: adapter writes RUN_DIR/final as a peft adapter; load_model (and so eval,
    # credit, diagnose) must give the trained model, not fail or silently load the base
    from grpolab.train.rundir import RunDir

    model, tok = lora_model
    base_dir = tmp_path / "base"
    model.save_pretrained(base_dir)
    tok.save_pretrained(base_dir)
    ids = torch.randint(3, 300, (2, 10))
    base_logits = _logits(model, ids)
    apply_lora(model, LoraSettings(r=4, alpha=8, target_modules=("q_proj", "v_proj", "down_proj")))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    want = _logits(model, ids)
    final = tmp_path / "run" / "final"
    save_adapter(model, final, base_model="base")  # relative, as a config gives it
    tok.save_pretrained(final)
    monkeypatch.chdir(tmp_path / "run")  # not where training ran: found from the adapter's parents
    loaded, ltok = load_model(final)
    assert not has_lora(loaded) and ltok.chat_template == tok.chat_template
    got = _logits(loaded, ids)
    assert torch.allclose(got, want, atol=1e-5) and not torch.allclose(got, base_logits, atol=1e-3)
    (tmp_path / "run" / "config.yaml").write_text("{}\n")
    assert RunDir(tmp_path / "run").model_dir() == final
    moved = tmp_path / "base_moved"
    base_dir.rename(moved)
    with pytest.raises(FileNotFoundError, match="base model 'base' was not found.*base=BASE_DIR"):
        load_model(final)
    from grpolab.models.io import load_adapter

    assert torch.allclose(_logits(load_adapter(final, base=moved)[0], ids), want, atol=1e-5)


def test_a_lora_training_checkpoint_loads_with_its_adapters(lora_model, tmp_path):
    # checkpoints/step_N/model of a LoRA run holds base_layer/lora_A names that from_pretrained
    # alone would drop (re-initialising the projections): load_model rebuilds and merges them
    from grpolab.train.checkpoint import latest_checkpoint, save_checkpoint

    model, tok = lora_model
    ids = torch.randint(3, 300, (2, 10))
    apply_lora(model, LoraSettings(r=4, alpha=8))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    want = _logits(model, ids)
    save_checkpoint(tmp_path / "run", 3, model, tok, {"step": 3})
    ckpt = latest_checkpoint(tmp_path / "run")
    loaded, _ = load_model(ckpt.model_dir)
    assert not has_lora(loaded) and torch.allclose(_logits(loaded, ids), want, atol=1e-5)
    (ckpt.model_dir / "grpolab_lora.json").unlink()  # a checkpoint from before the settings were kept
    with pytest.raises(ValueError, match="LoRA layers injected.*--resume"):
        load_model(ckpt.model_dir)
