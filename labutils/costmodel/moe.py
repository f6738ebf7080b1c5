"""Mixture of experts: expert capacity and the load-balancing loss.

Sources: the Switch Transformer (arXiv:2101.03961) and Megatron-LM
``megatron/core/transformer/moe/moe_utils.py``.
"""
from __future__ import annotations

import math

from labutils.costmodel._checks import check_nonnegative, check_positive_int


def expert_capacity(tokens: int, num_experts: int, top_k: int = 1, capacity_factor: float = 1.0) -> int:
    """Tokens one expert accepts per batch: ceil(T k / E x capacity_factor).

    ``tokens`` T routed in the batch (on this expert-parallel group), ``num_experts`` E,
    ``top_k`` k experts per token, ``capacity_factor`` the head-room over a perfectly even
    split (1.0 = exactly even; the Switch paper compares 1.0, 1.25 and 2.0). Tokens routed to an
    expert beyond its capacity are dropped: they skip the expert and only the residual
    connection carries them.

    The classic mistake is ceil(T / E x capacity_factor), forgetting k: with top-2 routing
    every token makes two assignments, so that capacity is half what the even split needs
    and about half the assignments are dropped even when routing is perfectly balanced
    (T = 4096, E = 8, k = 2, factor 1.0: 1024 per expert, not 512).

    The product is computed exactly (the factor as the decimal it prints as): 1000 tokens,
    10 experts, factor 1.1 give 110, where floating point (1000 / 10 x 1.1 =
    110.00000000000001) would round up to 111.

    >>> expert_capacity(tokens=4096, num_experts=8, top_k=2, capacity_factor=1.25)
    1280
    """
    from fractions import Fraction

    check_positive_int(tokens=tokens, num_experts=num_experts, top_k=top_k)
    if top_k > num_experts:
        raise ValueError(f"top_k ({top_k}) cannot exceed num_experts ({num_experts}): a token picks distinct experts")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float)) \
            or not math.isfinite(capacity_factor) or capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be a number > 0 (e.g. 1.25), got {capacity_factor!r}")
    exact = Fraction(int(tokens) * int(top_k), int(num_experts)) * Fraction(repr(float(capacity_factor)))
    return math.ceil(exact)


def load_balancing_loss(router_probs, expert_index, alpha: float = 1e-2):
    """Switch Transformer's auxiliary load-balancing loss: alpha x E x sum_i f_i P_i (a torch scalar).

    ``router_probs``: (T, E) tensor, each row the router's softmax over the E experts.
    ``expert_index``: (T,) or (T, k) integer tensor, the expert(s) each token was sent to.
    f_i = share of the T k assignments that went to expert i; P_i = mean of column i of
    ``router_probs``. ``alpha`` = 1e-2 as in the paper (arXiv:2101.03961, section 2.2).

    Only P carries gradient: f_i counts the argmax / top-k choices and is a constant here
    (detached). Backpropagating through f_i (say, computing it from a soft or
    straight-through mask) is the classic mistake.
    Under uniform routing (every P_i = f_i = 1/E) the loss equals ``alpha``; it grows as the
    routing concentrates on fewer experts. For k > 1, f sums to 1 over experts as
    Megatron-LM's switch_load_balancing_loss_func normalises it (by T k).
    """
    import torch

    if not isinstance(router_probs, torch.Tensor) or router_probs.dim() != 2 \
            or not router_probs.is_floating_point():
        raise ValueError("router_probs must be a floating (tokens, experts) tensor of router probabilities")
    tokens, num_experts = router_probs.shape
    if tokens == 0:
        raise ValueError("router_probs has no tokens: pass at least one row")
    if not isinstance(expert_index, torch.Tensor) or expert_index.is_floating_point() \
            or expert_index.dim() not in (1, 2) or expert_index.shape[0] != tokens:
        raise ValueError(f"expert_index must be an integer tensor of shape ({tokens},) or ({tokens}, k): "
                         "the expert(s) each token was routed to")
    if expert_index.numel() and (int(expert_index.min()) < 0 or int(expert_index.max()) >= num_experts):
        raise ValueError(f"expert_index values must lie in 0..{num_experts - 1} (router_probs has {num_experts} experts)")
    check_nonnegative(alpha=alpha)
    assignments = expert_index.reshape(-1).long()
    counts = torch.bincount(assignments, minlength=num_experts).to(router_probs.dtype)
    token_share = (counts / assignments.numel()).detach()  # f_i: not differentiated
    mean_prob = router_probs.mean(dim=0)                      # P_i: carries the gradient
    return alpha * num_experts * torch.sum(token_share * mean_prob)
