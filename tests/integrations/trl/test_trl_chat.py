"""The TRL adapter on a chat model with TRL's conversational dataset format: credit (RLSD) trains,
the teacher's privileged prompt is rendered by TRL's own chat-template call and ends with the same
generation prompt, TRL's metric keys stay, and unusable inputs are refused before the model loads."""

from __future__ import annotations

import dataclasses

import pytest
import torch

pytest.importorskip("trl", reason="trl is in the test extra: pip install -e '.[test]'")
from chat_helpers import build_chat_model, build_chat_tokenizer  # noqa: E402
from datasets import Dataset  # noqa: E402

from grpolab.integrations.trl.trainer import GrpolabGRPOConfig, GrpolabGRPOTrainer  # noqa: E402


def _reward(prompts, completions, **kwargs):
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def _dataset(n=8):
    qs = [f"Natalia sold {i} clips in April and {i + 2} in May. How many?" for i in range(n)]
    return Dataset.from_dict({
        "prompt": [[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": q}]
                   for q in qs],
        "solution": [f"{i} + {i + 2} = {2 * i + 2}. #### {2 * i + 2}" for i in range(n)],
    })


def _args(tmp_path, **kw):
    base = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, gradient_accumulation_steps=1,
                num_generations=2, max_completion_length=6, max_steps=2, learning_rate=1e-2, beta=0.0,
                report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, use_cpu=True,
                bf16=False, fp16=False, seed=0, dataloader_num_workers=0, grpolab_credit_name="rlsd",
                grpolab_privileged_column="solution")
    names = {f.name for f in dataclasses.fields(GrpolabGRPOConfig)}
    base["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = False
    base.update(kw)
    return GrpolabGRPOConfig(**base)


@pytest.mark.parametrize("placement", ["user", "system"])
def test_conversational_credit_trains_and_aligns(tmp_path, placement):
    torch.manual_seed(0)
    tok = build_chat_tokenizer()
    model = build_chat_model(tok)
    tr = GrpolabGRPOTrainer(model=model, processing_class=tok, reward_funcs=_reward, train_dataset=_dataset(),
                            args=_args(tmp_path, grpolab_credit_privileged_placement=placement))
    seen = {}
    orig = tr._credit

    def spy(inputs, out, mask, adv_B, mode):
        t_ids, t_mask = tr.teacher_prompt_ids(inputs, out["prompt_ids"].device)
        seen.setdefault("pairs", []).append((out["prompt_ids"], out["prompt_mask"], t_ids, t_mask, inputs))
        return orig(inputs, out, mask, adv_B, mode)

    tr._credit = spy
    tr.train()
    assert tr.state.global_step == 2
    tail = tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    for p_ids, p_mask, t_ids, t_mask, inputs in seen["pairs"]:
        for b in range(p_ids.shape[0]):
            s_row = p_ids[b][p_mask[b].bool()].tolist()
            t_row = t_ids[b][t_mask[b].bool()].tolist()
            assert s_row[-len(tail):] == tail and t_row[-len(tail):] == tail   # same generation prompt
            text = tok.decode(t_row)
            sol = inputs[b]["solution"]
            assert text.count(sol) == 1 and text.index(sol) < text.rindex("<|im_start|>assistant")
            assert text.count(inputs[b]["prompt"][-1]["content"]) == 1          # the question once
            if placement == "system":
                assert text.index(sol) < text.index("<|im_start|>user")
    logs = {k for row in tr.state.log_history for k in row}
    assert {"grpolab/credit/lam", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
            "grpolab/clip_frac"} <= logs


def test_conversational_credit_with_trls_peft_config(tmp_path):
    from peft import LoraConfig

    torch.manual_seed(0)
    tok = build_chat_tokenizer()
    tr = GrpolabGRPOTrainer(model=build_chat_model(tok), processing_class=tok, reward_funcs=_reward,
                            train_dataset=_dataset(), args=_args(tmp_path, max_steps=1),
                            peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    lora = {n: p.detach().clone() for n, p in tr.model.named_parameters() if "lora_B" in n}
    tr.train()
    assert tr.state.global_step == 1 and lora
    assert any(not torch.equal(p, lora[n]) for n, p in tr.model.named_parameters() if n in lora)
    assert any("grpolab/credit/lam" in row for row in tr.state.log_history)


def test_unusable_credit_inputs_are_refused_before_the_model_loads(tmp_path):
    missing = tmp_path / "no-such-model"  # would fail to load; the refusal must come first
    with pytest.raises(ValueError, match="column 'solution'"):
        GrpolabGRPOTrainer(model=str(missing), reward_funcs=_reward, args=_args(tmp_path),
                           train_dataset=_dataset().remove_columns("solution"))
    multimodal = Dataset.from_dict({"prompt": [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]],
                                    "solution": ["1"]})
    with pytest.raises(ValueError, match="multimodal"):
        GrpolabGRPOTrainer(model=str(missing), reward_funcs=_reward, args=_args(tmp_path), train_dataset=multimodal)
    with pytest.raises(ValueError, match="grpolab_credit_privileged_placement"):
        _args(tmp_path, grpolab_credit_privileged_placement="assistant")
    with pytest.raises(ValueError, match=r"\{privileged\}"):
        _args(tmp_path, grpolab_credit_chat_template="{prompt} only")
