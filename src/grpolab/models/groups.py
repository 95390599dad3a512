"""Parameter groups: which parameters are embeddings, attention, MLP, norms, LM head, per layer.

Used by diagnostics (per-group drift, revert/transplant ablations) and by optimisers that treat
groups differently. Classification is by parameter *name*, split on dots, so it works for any
model whose naming follows the common Hugging Face conventions:

================  =====================================================================
group             a dotted name segment that matches
================  =====================================================================
``norm``          anything containing ``norm`` (``input_layernorm``, ``model.norm``,
                  ``q_norm``), or ``ln_1``/``ln_f``-style GPT-2 names
``embed``         ``embed_tokens``, ``wte``, ``wpe``, ``embed_positions``, ...
``head``          ``lm_head``, or a top-level ``embed_out`` / ``output`` (the unembedding)
``attention``     ``self_attn``, ``attn``, ``attention``, ``self_attention``
``mlp``           ``mlp``, ``feed_forward``, ``ffn``, ``block_sparse_moe``, ``moe``
================  =====================================================================

Rules are tried in that order and the first hit wins, so every parameter lands in exactly one of
the five kinds (a norm inside an attention block, e.g. Qwen3's ``self_attn.q_norm``, is a
``norm``). A parameter that matches none raises ValueError naming it; add a regex to
:data:`GROUP_PATTERNS` for an exotic architecture.

Tied embeddings: ``model.named_parameters()`` lists a shared tensor once, under its first name
(the input embedding), so a model with ``tie_word_embeddings=True`` (e.g. GPT-2) has its
unembedding in ``embed`` and an empty ``head`` group.

Per-layer groups come from the ``layers.{i}`` / ``h.{i}`` / ``blocks.{i}`` / ``layer.{i}`` part
of the name: ``layer.{i}`` (everything in block i), and ``layer.{i}.attention``,
``layer.{i}.mlp``, ``layer.{i}.norm`` (the block's share of each kind).
"""

from __future__ import annotations

import re

__all__ = ["GROUP_KINDS", "GROUP_PATTERNS", "classify_parameter", "layer_index", "parameter_groups"]

#: The five kinds that partition a model's parameters.
GROUP_KINDS: tuple[str, ...] = ("embed", "attention", "mlp", "norm", "head")


def _segment(pattern: str) -> str:
    """Regex matching ``pattern`` as one whole dotted segment of a parameter name."""
    return rf"(?:^|\.)(?:{pattern})(?:\.|$)"


#: kind -> regexes searched (``re.search``, case-insensitive) in the full parameter name.
#: Tried in this order; the first kind with a hit wins.
GROUP_PATTERNS: dict[str, tuple[str, ...]] = {
    "norm": (_segment(r"[^.]*norm[^.]*"), _segment(r"ln(?:_\w+|\d*)")),
    "embed": (
        _segment(
            r"embed_tokens|wte|wpe|embed_positions|word_embeddings|position_embeddings"
            r"|tok_embeddings|embed_in|embeddings?"
        ),
    ),
    # ``output``/``embed_out`` only at top level: "output" is also a sub-module name elsewhere.
    "head": (_segment(r"lm_head"), r"^(?:embed_out|output)\."),
    "attention": (_segment(r"self_attn|attn|attention|self_attention"),),
    "mlp": (_segment(r"mlp|feed_forward|ffn|block_sparse_moe|moe"),),
}

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks|layer|block)\.(\d+)(?:\.|$)")


def classify_parameter(name: str) -> str:
    """Return the kind ("embed", "attention", "mlp", "norm" or "head") of a parameter name.

    Raises:
        ValueError: no pattern of :data:`GROUP_PATTERNS` matches ``name``.
    """
    for kind, patterns in GROUP_PATTERNS.items():
        for pattern in patterns:
            if re.search(pattern, name, flags=re.IGNORECASE):
                return kind
    raise ValueError(
        f"cannot tell which group parameter {name!r} belongs to: nothing in it matches "
        f"grpolab.models.groups.GROUP_PATTERNS {GROUP_PATTERNS}; add a pattern for this "
        "architecture to GROUP_PATTERNS"
    )


def layer_index(name: str) -> int | None:
    """The decoder block index in a parameter name (``model.layers.3.mlp...`` -> 3), or None."""
    m = _LAYER_RE.search(name)
    return int(m.group(1)) if m else None


def parameter_groups(model) -> dict[str, list[str]]:
    """Map group names to the names of the parameters in them.

    Args:
        model: a ``torch.nn.Module`` (any HF causal LM with conventional naming).

    Returns:
        ``{"embed": [...], "attention": [...], "mlp": [...], "norm": [...], "head": [...],
        "layer.0": [...], "layer.0.attention": [...], "layer.0.mlp": [...],
        "layer.0.norm": [...], "layer.1": [...], ...}``. The five kind groups are always present
        (possibly empty, e.g. ``head`` for tied embeddings) and partition
        ``model.named_parameters()``; per-layer groups are present for every layer that has
        parameters (``layer.{i}.<kind>`` only when non-empty). Names keep
        ``named_parameters()`` order.
    """
    groups: dict[str, list[str]] = {kind: [] for kind in GROUP_KINDS}
    layer_groups: dict[int, dict[str, list[str]]] = {}
    unknown: list[str] = []
    for name, _ in model.named_parameters():
        try:
            kind = classify_parameter(name)
        except ValueError:
            unknown.append(name)
            continue
        groups[kind].append(name)
        idx = layer_index(name)
        if idx is not None:
            per = layer_groups.setdefault(idx, {"": []})
            per[""].append(name)
            per.setdefault(kind, []).append(name)
    if unknown:
        raise ValueError(
            f"{len(unknown)} parameter(s) match no group, e.g. {unknown[:5]}; add a pattern for "
            "this architecture to grpolab.models.groups.GROUP_PATTERNS "
            f"(current: {GROUP_PATTERNS})"
        )
    for idx in sorted(layer_groups):
        per = layer_groups[idx]
        groups[f"layer.{idx}"] = per[""]
        for kind in ("attention", "mlp", "norm", "embed", "head"):
            if per.get(kind):
                groups[f"layer.{idx}.{kind}"] = per[kind]
    return groups
