"""LoRA adapters through the ``peft`` library (Hu et al. 2021, arXiv 2106.09685).

:func:`apply_lora` injects LoRA layers into a Hugging Face causal LM *in place*
(``peft.inject_adapter_in_model``): the model keeps its own class and ``forward`` signature, so
the sampler, the update forward and the teacher forward treat it like any other model. Only the
adapter weights ``A [r, in]``, ``B [out, r]`` train; the base weights are frozen and stay
bit-identical, so the *base model* is always available by switching the adapters off:

* :func:`adapters_disabled` -- a context manager; inside it the model computes the base model.
* :class:`AdaptersOff` -- a module view of "the same model with adapters off" that holds no
  weights of its own. grpolab uses it as the KL reference and as the RLSD/GEAR/OPSD teacher, so a
  frozen teacher costs no second copy of the weights (deviation from docs/methods.md, "Token-level credit": with
  LoRA the frozen teacher is the base model and is never re-synced to the policy).

Saving: :func:`merged_copy` folds ``W + (alpha / r) B A`` into plain linear layers (a standard
HF model, loadable without peft); :func:`save_adapter` writes ``adapter_model.safetensors`` +
``adapter_config.json`` in peft's layout (``peft.PeftModel.from_pretrained(base, path)`` loads it).
"""

from __future__ import annotations

import copy
import functools
import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

__all__ = [
    "AdaptersOff",
    "LoraSettings",
    "adapters_disabled",
    "apply_lora",
    "has_lora",
    "merged_copy",
    "parameter_counts",
    "save_adapter",
    "is_adapter_dir",
    "LORA_CHECKPOINT_FILE",
    "lora_checkpoint_settings",
]

#: The projections of Llama / Qwen2 / Mistral blocks: every linear layer but the LM head.
DEFAULT_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSettings:
    """``model.lora`` in a config: rank ``r``, scale ``alpha`` (the update is ``alpha / r * B A``),
    dropout on the adapter input, and the module names to adapt (a list, or ``"all-linear"``)."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] | str = DEFAULT_TARGETS

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "LoraSettings":
        allowed = {"r", "alpha", "dropout", "target_modules"}
        unknown = set(d) - allowed
        if unknown:
            raise ValueError(f"unknown LoRA keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        kw = dict(d)
        if "target_modules" in kw and not isinstance(kw["target_modules"], str):
            kw["target_modules"] = tuple(kw["target_modules"])
        s = LoraSettings(**kw)
        if isinstance(s.r, bool) or not isinstance(s.r, int) or s.r < 1:
            raise ValueError(f"r={s.r!r} must be a positive integer (e.g. 16)")
        if isinstance(s.alpha, bool) or not isinstance(s.alpha, (int, float)) or s.alpha <= 0:
            raise ValueError(f"alpha={s.alpha!r} must be a positive number (e.g. 2 * r)")
        if not isinstance(s.dropout, (int, float)) or not 0 <= s.dropout < 1:
            raise ValueError(f"dropout={s.dropout!r} must be in [0, 1)")
        if not s.target_modules or (isinstance(s.target_modules, tuple)
                                    and not all(isinstance(t, str) and t for t in s.target_modules)):
            raise ValueError(f"target_modules={s.target_modules!r} must be module names or 'all-linear'")
        return s

    def to_peft(self):
        require_peft()
        from peft import LoraConfig

        targets = self.target_modules if isinstance(self.target_modules, str) else list(self.target_modules)
        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=float(self.dropout),
                          target_modules=targets, bias="none", task_type="CAUSAL_LM")


def require_peft() -> None:
    """Raise ``ImportError`` naming the install command unless ``peft`` can be imported."""
    try:
        import peft  # noqa: F401
    except ImportError:
        raise ImportError('model.lora needs the peft package, which is not installed: pip install -e ".[lora]" '
                          "in a clone of grpolab (or pip install 'grpolab[lora]')") from None


def _tuner_layers(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    for m in model.modules():
        if isinstance(m, BaseTunerLayer):
            yield m


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds peft adapter layers."""
    if getattr(model, "peft_config", None) is None:
        return False
    return any(True for _ in _tuner_layers(model))


def apply_lora(model: torch.nn.Module, settings: LoraSettings | dict) -> torch.nn.Module:
    """Inject LoRA adapters into ``model`` in place; freeze every base weight. Returns ``model``.

    Raises:
        ValueError: none of ``target_modules`` exists in the model (the message lists its linear
            layer names).
    """
    require_peft()
    from peft import inject_adapter_in_model

    if isinstance(settings, dict):
        settings = LoraSettings.from_dict(settings)
    if has_lora(model):
        raise ValueError("the model already holds LoRA adapters")
    try:
        inject_adapter_in_model(settings.to_peft(), model)
    except ValueError as e:
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
        raise ValueError(f"LoRA target_modules={settings.target_modules!r} do not match the model ({e}); "
                         f"its linear layers are named {names}") from None
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts (tied weights counted once)."""
    seen: set[int] = set()
    trainable = total = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return trainable, total


@contextmanager
def adapters_disabled(model: torch.nn.Module):
    """Inside the block ``model`` computes its base model (every adapter layer bypassed)."""
    layers = list(_tuner_layers(model))
    for m in layers:
        m.enable_adapters(False)
    try:
        yield model
    finally:
        for m in layers:
            m.enable_adapters(True)
            for p_name, p in m.named_parameters():  # enable_adapters(True) re-enables grads on adapters
                if "lora_" not in p_name:
                    p.requires_grad_(False)


class AdaptersOff(torch.nn.Module):
    """The base model of a LoRA model, as a module that owns no weights.

    ``AdaptersOff(model)(**kw)`` is ``model(**kw)`` with the adapters disabled. Its ``forward`` has
    the wrapped model's signature (grpolab inspects it for cache and ``logits_to_keep`` names);
    ``parameters()`` are the wrapped model's (for its device and dtype); ``state_dict()`` is empty,
    so checkpoints do not store the base weights twice, and ``load_state_dict`` of an empty dict
    is a no-op.
    """

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "_model", model)  # not registered: no second copy anywhere
        self.config = model.config
        fwd = model.forward

        @functools.wraps(fwd)
        def forward(*args, **kwargs):
            with adapters_disabled(model):
                return fwd(*args, **kwargs)

        object.__setattr__(self, "forward", forward)

    def parameters(self, recurse: bool = True):
        return self._model.parameters(recurse)

    def get_output_embeddings(self):
        return self._model.get_output_embeddings()

    def __deepcopy__(self, memo):  # a copy of a view is the same view
        return self


def merged_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` with every adapter folded into its base linear layer (no peft layers left)."""
    out = copy.deepcopy(model)
    for name, module in list(out.named_modules()):
        if not hasattr(module, "merge") or not hasattr(module, "get_base_layer"):
            continue
        from peft.tuners.tuners_utils import BaseTunerLayer

        if not isinstance(module, BaseTunerLayer):
            continue
        module.merge()
        parent_name, _, child = name.rpartition(".")
        parent = out.get_submodule(parent_name) if parent_name else out
        setattr(parent, child, module.get_base_layer())
    if hasattr(out, "peft_config"):
        del out.peft_config
    for p in out.parameters():
        p.requires_grad_(True)
    return out


def save_adapter(model: torch.nn.Module, path: str | Path, *, base_model: str | None = None) -> Path:
    """Write the adapter in peft's layout (``adapter_model.safetensors``, ``adapter_config.json``).

    ``base_model``: the base model's directory, recorded as ``base_model_name_or_path``. The
    directory is written to a temporary name and renamed into place (atomic).
    """
    import os
    import shutil
    import tempfile

    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = get_peft_model_state_dict(model)
    # peft's PeftModel prefixes the wrapped model's names with "base_model.model."
    state = {f"base_model.model.{k}": v.detach().cpu().contiguous() for k, v in state.items()}
    cfg = model.peft_config["default"]
    cfg_dict = cfg.to_dict()
    cfg_dict["base_model_name_or_path"] = base_model
    for k, v in list(cfg_dict.items()):
        if isinstance(v, set):
            cfg_dict[k] = sorted(v)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        save_file(state, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(cfg_dict, indent=2, default=str) + "\n")
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def is_adapter_dir(path: str | Path) -> bool:
    """A peft adapter directory (``adapter_config.json``, no ``config.json``): what
    ``model.lora_save: adapter`` writes to ``RUN_DIR/final``."""
    path = Path(path)
    return path.is_dir() and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file()


#: Written next to a training checkpoint's weights when the policy holds LoRA adapters
#: (:func:`grpolab.train.checkpoint.save_checkpoint`): the settings that rebuild its layout.
LORA_CHECKPOINT_FILE = "grpolab_lora.json"


def lora_checkpoint_settings(model: torch.nn.Module) -> dict[str, Any]:
    """The LoRA settings of ``model`` (adapters injected by :func:`apply_lora`) as a JSON-able dict."""
    cfg = model.peft_config["default"]
    targets = cfg.target_modules if isinstance(cfg.target_modules, str) else sorted(cfg.target_modules)
    return {"r": int(cfg.r), "alpha": float(cfg.lora_alpha), "dropout": float(cfg.lora_dropout or 0.0),
            "target_modules": targets}


def _weight_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    keys = []
    for f in sorted(path.glob("*.safetensors")):
        with safe_open(str(f), framework="pt", device="cpu") as fh:
            keys += list(fh.keys())
    return keys


def holds_injected_lora(path: str | Path) -> bool:
    """The weights in ``path`` are those of a model with LoRA layers injected (``base_layer`` /
    ``lora_A`` names): a training checkpoint, which ``from_pretrained`` alone would load wrongly."""
    return any(".base_layer." in k or ".lora_A." in k for k in _weight_keys(Path(path)))


def settings_dict(settings: LoraSettings) -> dict[str, Any]:
    d = asdict(settings)
    if isinstance(d["target_modules"], tuple):
        d["target_modules"] = list(d["target_modules"])
    return d
