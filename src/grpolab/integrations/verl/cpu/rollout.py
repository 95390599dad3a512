"""A CPU rollout for verl 0.9: Hugging Face ``generate`` behind verl's rollout-server interface.

verl 0.9 generates through rollout *servers* (vLLM, SGLang, TensorRT-LLM: GPU only). Three small
pieces put a CPU one in their place, registered under the rollout name ``hf_cpu``
(``actor_rollout_ref.rollout.name=hf_cpu``):

- :class:`HFRolloutServer`, a Ray actor (0 CPUs asked) holding its own copy of the model. verl's
  agent loop sends it token-in / token-out requests (``generate(prompt_ids, sampling_params,
  request_id)``, answered with verl's ``TokenOutput``); requests that arrive together are
  generated as one left-padded batch. Temperature, top-p and top-k follow the sampling params;
  temperature 0 is greedy; a response stops at the tokenizer's EOS (included, as vLLM does) or
  at ``max_tokens`` (``rollout.response_length`` by default).
- :class:`HFCPURolloutReplica`, verl's ``RolloutReplica`` for it: one server per replica, named
  ``grpolab_cpu_rollout_<replica_rank>``.
- :class:`HFCPURolloutAdapter`, the ``BaseRollout`` that lives in verl's actor worker: verl's
  weight sync (``update_weights``, the ``naive`` checkpoint engine of the hybrid engine) hands
  it the trainer's full tensors and it sends them to its replica's server, which copies them in.
  So each step's rollout runs the weights of the last update, as with vLLM.

What it is not: fast. Generation is serial HF ``generate`` on CPU and every step ships a full
copy of the weights; it exists so that verl's whole loop can be rehearsed without a GPU.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import ray
import torch
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf_cpu"


def server_name(replica_rank: int) -> str:
    """The Ray actor name of replica ``replica_rank``'s server."""
    return f"grpolab_cpu_rollout_{replica_rank}"


class HFRolloutServer:
    """One rollout server: an HF causal LM on CPU answering verl's token-in / token-out calls."""

    def __init__(self, model_path: str, response_length: int, prompt_length: int, seed: int,
                 trust_remote_code: bool = False, max_batch: int = 256):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                          trust_remote_code=trust_remote_code).eval()
        tok = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = tok.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, (list, tuple)) else [eos]) - {None}
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else min(self.eos_ids or {0})
        self.response_length = int(response_length)
        self.max_len = int(prompt_length) + int(response_length)
        self.max_batch = int(max_batch)
        self.generator = torch.Generator().manual_seed(int(seed))
        self.global_steps: Optional[int] = None
        self.weight_updates = 0
        self._queue: list[tuple[list[int], dict[str, Any], asyncio.Future]] = []
        self._worker: Optional[asyncio.Task] = None

    # ---- generation ---------------------------------------------------------------------------

    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        if image_data is not None or video_data is not None:
            raise NotImplementedError("the hf_cpu rollout is text-only")
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(([int(t) for t in prompt_ids], dict(sampling_params), fut))
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._drain())
        return await fut

    async def _drain(self) -> None:
        await asyncio.sleep(0.05)  # let the requests of one agent-loop batch arrive together
        while self._queue:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch:]
            groups: dict[tuple, list] = {}
            for item in batch:  # one generate call per distinct sampling setting
                groups.setdefault(self._key(item[1]), []).append(item)
            for items in groups.values():
                try:
                    outs = await asyncio.to_thread(self._generate_batch, items)
                except Exception as e:  # noqa: BLE001 - handed to every waiting request
                    for _, _, fut in items:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (_, _, fut), out in zip(items, outs):
                    if not fut.done():
                        fut.set_result(out)

    def _key(self, sp: dict[str, Any]) -> tuple:
        max_tokens = sp.get("max_tokens", sp.get("max_new_tokens", self.response_length))
        return (float(sp.get("temperature", 1.0)), float(sp.get("top_p", 1.0)), int(sp.get("top_k", -1) or -1),
                int(max_tokens), bool(sp.get("logprobs", False)))

    @torch.no_grad()
    def _generate_batch(self, items) -> list[TokenOutput]:
        temperature, top_p, top_k, max_tokens, want_logprobs = self._key(items[0][1])
        prompts = [p for p, _, _ in items]
        longest = max(len(p) for p in prompts)
        max_new = max(1, min(max_tokens, self.response_length, self.max_len - longest))
        ids = torch.full((len(prompts), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(prompts):  # left padding
            ids[i, longest - len(p):] = torch.tensor(p)
            mask[i, longest - len(p):] = 1
        greedy = temperature <= 0
        n = len(prompts)
        done = torch.zeros(n, dtype=torch.bool)
        out_tokens: list[list[int]] = [[] for _ in range(n)]
        out_logps: list[list[float]] = [[] for _ in range(n)]
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        past = None
        step_ids, step_pos, step_mask = ids, pos, mask
        for _ in range(max_new):
            out = self.model(input_ids=step_ids, attention_mask=step_mask, position_ids=step_pos,
                             past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :].float()
            if greedy:
                logp = torch.log_softmax(logits, -1)
                nxt = logits.argmax(-1)
            else:
                logits = logits / temperature
                if top_k > 0:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                if top_p < 1.0:
                    srt, idx = torch.sort(logits, descending=True, dim=-1)
                    cum = torch.softmax(srt, -1).cumsum(-1)
                    drop = cum - torch.softmax(srt, -1) > top_p
                    srt = srt.masked_fill(drop, float("-inf"))
                    logits = torch.full_like(logits, float("-inf")).scatter(-1, idx, srt)
                logp = torch.log_softmax(logits, -1)
                nxt = torch.multinomial(logp.exp(), 1, generator=self.generator).squeeze(-1)
            for i in range(n):
                if done[i]:
                    continue
                t = int(nxt[i])
                out_tokens[i].append(t)
                out_logps[i].append(float(logp[i, t]))
                if t in self.eos_ids:
                    done[i] = True
            if bool(done.all()):
                break
            nxt = torch.where(done, torch.full_like(nxt, self.pad_id), nxt)
            step_ids = nxt[:, None]
            step_pos = step_pos[:, -1:] + 1
            step_mask = torch.cat([step_mask, torch.ones(n, 1, dtype=step_mask.dtype)], dim=1)
        extra = {"global_steps": self.global_steps}
        return [TokenOutput(token_ids=toks, log_probs=lps if want_logprobs else None, stop_reason="completed",
                            extra_fields=dict(extra)) for toks, lps in zip(out_tokens, out_logps)]

    # ---- weights ------------------------------------------------------------------------------

    def load_weights(self, state: dict[str, torch.Tensor], global_steps: Optional[int] = None) -> int:
        """Copy the trainer's full tensors in (names as in the HF model's ``state_dict``); returns how many."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise KeyError(f"hf_cpu rollout: weights not in the rollout model: {unknown[:5]}")
        with torch.no_grad():
            for name, t in state.items():
                own[name].copy_(t.to(own[name].dtype))
        if "lm_head.weight" not in state and getattr(self.model.config, "tie_word_embeddings", False):
            self.model.tie_weights()
        self.global_steps = global_steps
        self.weight_updates += 1
        return len(state)

    def stats(self) -> dict[str, Any]:
        return {"weight_updates": self.weight_updates, "global_steps": self.global_steps}

    # ---- verl's control calls: nothing to free or resume on CPU ------------------------------

    async def wake_up(self): return None
    async def sleep(self): return None
    async def abort_all_requests(self, reject_request: bool = False): return None
    async def resume_generation(self): return None
    async def clear_kv_cache(self): return None
    async def release_kv_cache(self): return None
    async def resume_kv_cache(self): return None
    async def start_profile(self, **kwargs): return None
    async def stop_profile(self): return None


class HFCPURolloutReplica(RolloutReplica):
    """verl's rollout replica for ``hf_cpu``: one :class:`HFRolloutServer` actor per replica."""

    async def launch_servers(self):
        cfg = self.config
        server_cls = ray.remote(HFRolloutServer)
        name = server_name(self.replica_rank)
        self.servers = [server_cls.options(name=name, num_cpus=0, max_concurrency=self.max_concurrency).remote(
            model_path=self.model_config.local_path if hasattr(self.model_config, "local_path")
            else self.model_config.path,
            response_length=cfg.response_length, prompt_length=cfg.prompt_length,
            seed=int(getattr(cfg, "seed", 0) or 0) + self.replica_rank,
            trust_remote_code=bool(getattr(self.model_config, "trust_remote_code", False)),
        )]
        self._server_handle = self.servers[0]
        self._server_address = f"hf_cpu://{name}"  # a key for verl's router; nothing listens on it

    def rollout_worker_use_gpu(self) -> bool:
        return False


class HFCPURolloutAdapter(BaseRollout):
    """The rollout side of verl's actor worker: forwards each weight sync to this rank's server."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs):
        super().__init__(config, model_config, device_mesh, *args, **kwargs)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        self.replica_rank, self.is_leader = rank // world, rank % world == 0

    async def resume(self, tags: list[str]):
        return None

    async def release(self):
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs):
        if wire_format != "named_tensors":
            raise NotImplementedError(f"hf_cpu rollout: weight format {wire_format!r} (only named_tensors)")
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("hf_cpu rollout: LoRA adapters without merge (set model.lora.merge=true)")
        state = {}
        for name, t in weights:  # every rank iterates: the full tensors may need collectives
            full = t.full_tensor() if hasattr(t, "full_tensor") else t
            if self.is_leader:
                state[name] = full.detach().to("cpu", copy=True)
        if self.is_leader:
            server = ray.get_actor(server_name(self.replica_rank))
            await server.load_weights.remote(state, kwargs.get("global_steps"))
