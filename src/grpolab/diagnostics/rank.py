"""Effective rank (Roy & Vetterli 2007, "The effective rank: a measure of effective dimensionality").

``erank(A) = exp(H(p))`` with ``p_i = s_i / sum_j s_j`` over the singular values ``s`` of ``A`` and
``H`` the Shannon entropy (natural log, ``0 log 0 = 0``). It lies in ``[1, min(m, n)]``: 1 for a
rank-1 matrix, ``min(m, n)`` when all singular values are equal. docs/when-grpo-helps.md uses it on
weight matrices, weight updates and hidden states over a probe set.
"""

from __future__ import annotations

import torch

__all__ = ["effective_rank", "hidden_state_effective_ranks"]


def effective_rank(matrix: torch.Tensor, *, eps: float = 1e-12) -> float:
    """Roy & Vetterli effective rank of a 2-D ``[m, n]`` tensor (computed in float64).

    Returns 0.0 for an all-zero matrix (no spectrum to spread). Raises ValueError for other
    dimensionalities or non-finite entries.
    """
    if not isinstance(matrix, torch.Tensor):
        matrix = torch.as_tensor(matrix)
    if matrix.dim() != 2:
        raise ValueError(f"effective_rank needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    A = matrix.detach().to("cpu", torch.float64)
    if not torch.isfinite(A).all():
        raise ValueError("effective_rank: matrix has non-finite entries")
    s = torch.linalg.svdvals(A)
    total = s.sum()
    if total <= eps:
        return 0.0
    p = s / total
    p = p[p > 0]
    return float(torch.exp(-(p * p.log()).sum()))


@torch.no_grad()
def hidden_state_effective_ranks(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                                 *, center: bool = True) -> list[float]:
    """Effective rank of each layer's hidden states over a probe set.

    Args:
        model: a Hugging Face causal LM (called with ``output_hidden_states=True``).
        input_ids, attention_mask: ``[B, L]`` probe batch (left or right padded).
        center: subtract the mean hidden state first (so a shared offset does not count as a
            dimension).

    Returns:
        ``[num_layers + 1]`` floats: the embedding output, then each block's output, each the
        effective rank of the ``[N_tokens, H]`` matrix of hidden states at valid positions.
    """
    model.eval()
    device = next(model.parameters()).device
    out = model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                output_hidden_states=True)
    valid = attention_mask.to(device).bool()
    ranks = []
    for h_BLH in out.hidden_states:
        X = h_BLH[valid].double()  # [N, H]
        if center:
            X = X - X.mean(0, keepdim=True)
        ranks.append(effective_rank(X))
    return ranks
