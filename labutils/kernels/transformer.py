"""A small decoder-only transformer whose module names follow torchtitan's Llama model, for lab 7.

Lab 7 parallelizes it with PyTorch's own APIs (``DeviceMesh``, ``parallelize_module``,
``fully_shard``), so its plans name these modules exactly as torchtitan's
(``torchtitan/models/llama3/infra/parallelize.py``) name theirs::

    TinyTransformer
      tok_embeddings   nn.Embedding(vocab, dim)
      layers.i         TransformerBlock, n_layers of them:
        attention_norm   nn.LayerNorm(dim)
        attention        Attention: wq, wk, wv (dim -> dim), causal softmax attention, wo (dim -> dim)
        ffn_norm         nn.LayerNorm(dim)
        feed_forward     FeedForward: w1 (dim -> ffn_dim), GeLU, w2 (ffn_dim -> dim)
      norm             nn.LayerNorm(dim)
      output           nn.Linear(dim, vocab), no bias: the logits

Shapes: tokens (batch, seq) int64 -> logits (batch, seq, vocab). No linear layer has a bias.
``Attention`` infers its number of heads from the width of ``wq``'s output (``view(b, s, -1,
head_dim)``), so a column-parallel ``wq`` on t ranks computes n_heads / t whole heads per rank
with no change to the code.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes: vocabulary, model width ``dim``, ``n_heads`` (dividing ``dim``), feed-forward width, layers."""

    vocab: int = 32
    dim: int = 16
    n_heads: int = 4
    ffn_dim: int = 32
    n_layers: int = 2

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class Attention(nn.Module):
    """Causal multi-head self-attention, (b, s, dim) -> (b, s, dim)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.head_dim = config.head_dim
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(config.dim, config.dim, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (w(x).view(batch, seq, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)        # (b, heads, s, head_dim)
        return self.wo(y.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """w2(GeLU(w1 x)), (b, s, dim) -> (b, s, dim)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w2 = nn.Linear(config.ffn_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then + feed_forward(norm(.))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attention_norm, self.attention = nn.LayerNorm(config.dim), Attention(config)
        self.ffn_norm, self.feed_forward = nn.LayerNorm(config.dim), FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyTransformer(nn.Module):
    """Tokens (b, s) int64 -> logits (b, s, vocab)."""

    def __init__(self, config: TransformerConfig = TransformerConfig()):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.dim)
        self.output = nn.Linear(config.dim, config.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of logits (b, s, vocab) against targets (b, s): the training loss."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
