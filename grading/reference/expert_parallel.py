"""Expert parallelism: top-k routing with capacity, all-to-all dispatch and combine (Switch
Transformer, Fedus et al., arXiv:2101.03961; GShard, Lepikhin et al., arXiv:2006.16668;
the steps of Megatron-LM megatron/core/transformer/moe/token_dispatcher.py).

A rank holds B tokens x (B, h). The router W_r (E, h) scores them; p = softmax(x W_r^T) (B, E);
each token goes to its top-k experts with gates g = the k largest p. Each expert accepts

    C = ceil(B k / E * c)            (labutils.costmodel.expert_capacity; c the capacity factor)

assignments per batch from this rank, served in token order (token 0's choices first); the
others are dropped: they contribute zero, the residual carries the token. The auxiliary loss

    L_aux = lambda * E * sum_i f_i P_i       f_i share of the B k assignments (not differentiated),
                                             P_i mean router probability of expert i

E experts on the e ranks of the expert-parallel group, E/e each (rank r: experts r E/e ... ):

    rank 0 rows sorted by expert  [e0 e0 e1 | e2 | e3 e3 e3]    send_splits = rows per destination rank
         counts: all_to_all_single (E,) -> who sends me how many rows for each of my experts
         dispatch: all_to_all_single(rows, recv_splits, send_splits)  ->  rank r gets [from 0 | from 1 | ...]
         local experts on their rows, combine: all_to_all_single back with the splits swapped
         y = sum over kept assignments of g * expert(x), index_add into the token's row

Backward of an all-to-all is the all-to-all with the splits swapped (the gradient travels back).
Every function takes its expert-parallel ``group`` explicitly.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

from labutils import costmodel


def route(x, router_weight, top_k: int, capacity_factor: float, aux_coefficient: float):
    """(gates (B, k), experts (B, k) int64, kept (B, k) bool, aux loss scalar) for tokens x (B, h)."""
    num_tokens, num_experts = x.shape[0], router_weight.shape[0]
    probs = (x @ router_weight.T).softmax(dim=-1)                       # p (B, E)
    gates, experts = probs.topk(top_k, dim=-1)                          # g and the chosen experts (B, k)
    capacity = costmodel.expert_capacity(num_tokens, num_experts, top_k, capacity_factor)
    flat = experts.reshape(-1)                                          # token-major: token 0's choices first
    one_hot = torch.nn.functional.one_hot(flat, num_experts)
    position = (one_hot.cumsum(dim=0) * one_hot).sum(dim=1) - 1         # place in its expert's queue
    kept = (position < capacity).reshape(experts.shape)
    aux = costmodel.load_balancing_loss(probs, experts, alpha=aux_coefficient)
    return gates, experts, kept, aux


def split_sizes(rows_per_expert, group):
    """Exchange the row counts (one all_to_all_single of the (E,) counts). Returns (send_splits,
    recv_splits: rows to / from each rank of the group, lists of int; counts_from (e, E/e):
    rows each rank sends to each of this rank's experts)."""
    world_size = dist.get_world_size(group)
    local = rows_per_expert.numel() // world_size
    counts_from = torch.empty_like(rows_per_expert)
    dist.all_to_all_single(counts_from, rows_per_expert, group=group)   # block r of E/e: rank r's counts for me
    send_splits = rows_per_expert.view(world_size, local).sum(dim=1).tolist()
    counts_from = counts_from.view(world_size, local)
    return send_splits, counts_from.sum(dim=1).tolist(), counts_from


class AllToAll(torch.autograd.Function):
    """rows (sum(send_splits), h) -> (sum(recv_splits), h); backward: the same with the splits swapped."""

    @staticmethod
    def forward(ctx, rows, send_splits, recv_splits, group):
        ctx.send_splits, ctx.recv_splits, ctx.group = send_splits, recv_splits, group
        out = rows.new_empty((sum(recv_splits),) + tuple(rows.shape[1:]))
        dist.all_to_all_single(out, rows.contiguous(), recv_splits, send_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        grad_rows = grad_out.new_empty((sum(ctx.send_splits),) + tuple(grad_out.shape[1:]))
        dist.all_to_all_single(grad_rows, grad_out.contiguous(), ctx.send_splits, ctx.recv_splits, group=ctx.group)
        return grad_rows, None, None, None


def all_to_all_rows(rows, send_splits, recv_splits, group):
    """Differentiable all-to-all of rows with uneven splits (lists of int, one per rank of group)."""
    return AllToAll.apply(rows, list(send_splits), list(recv_splits), group)


class ExpertParallelMoE(nn.Module):
    """An MoE layer with its E experts spread over ``group``: forward(x (B, h)) -> (y (B, h), aux loss).

    ``router``: Linear(h, E, bias=False), the same on every rank; ``experts[j]``: this rank's
    j-th expert, global expert rank * E/e + j, Linear(h, f) - Tanh - Linear(f, h)."""

    def __init__(self, hidden, ffn_hidden, num_experts, top_k, capacity_factor, aux_coefficient, group):
        super().__init__()
        self.group, self.num_experts, self.top_k = group, num_experts, top_k
        self.capacity_factor, self.aux_coefficient = capacity_factor, aux_coefficient
        self.router = nn.Linear(hidden, num_experts, bias=False)
        local = num_experts // dist.get_world_size(group)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(hidden, ffn_hidden), nn.Tanh(),
                                                   nn.Linear(ffn_hidden, hidden)) for _ in range(local))

    def forward(self, x):
        gates, experts, kept, aux = route(x, self.router.weight, self.top_k, self.capacity_factor,
                                          self.aux_coefficient)
        keep = kept.reshape(-1)
        token_of = torch.arange(x.shape[0], device=x.device).repeat_interleave(self.top_k)[keep]
        expert_of, gate_of = experts.reshape(-1)[keep], gates.reshape(-1)[keep]
        order = torch.argsort(expert_of, stable=True)                   # permute: rows sorted by expert
        token_of, expert_of, gate_of = token_of[order], expert_of[order], gate_of[order]
        send, recv, counts_from = split_sizes(torch.bincount(expert_of, minlength=self.num_experts), self.group)
        arrived = all_to_all_rows(x[token_of], send, recv, self.group)    # dispatch
        outputs = [self.experts[j](chunk) for chunk, j in zip(                  # [from rank 0: e0 e1 | from 1: ...]
            arrived.split(counts_from.reshape(-1).tolist()), list(range(counts_from.shape[1])) * counts_from.shape[0])]
        returned = all_to_all_rows(torch.cat(outputs), recv, send, self.group)  # combine
        y = torch.zeros_like(x).index_add(0, token_of, returned * gate_of[:, None])  # unpermute, weight by g
        return y, aux
