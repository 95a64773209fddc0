"""A GPT-2-shaped model written with torch.nn, for zoe.torch's benchmark, example and tests.

Token and position embeddings, LayerNorm, causal self-attention with a mask buffer, a GELU MLP and
a head tied to the token embedding (one nn.Parameter in two modules), written the way a PyTorch
user writes them, not for zoe. Sizes are constructor arguments with tiny defaults; GPT-2 small is
GPT2(vocab=50257, context=1024, width=768, heads=12, layers=12), 124M parameters.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPT2", "Block", "CausalSelfAttention", "token_batches"]


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        # A buffer, not a parameter: it stays with torch.
        self.register_buffer("mask", torch.tril(torch.ones(context, context, dtype=torch.bool)))

    def forward(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.c_attn(x).split(width, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
        att = att.masked_fill(~self.mask[:tokens, :tokens], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(batch, tokens, width)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, width, heads, context):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, context)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """GPT-2's shape; ``forward(idx)`` gives the logits, ``forward(idx, targets)`` the mean loss."""

    def __init__(self, vocab=64, context=16, width=32, heads=2, layers=2):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads, context) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one parameter, two modules
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets=None):
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def token_batches(count, batch=4, context=16, vocab=64, seed=0):
    """``count`` (inputs, targets) pairs of random token ids, the targets the inputs shifted by one."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        seq = torch.randint(0, vocab, (batch, context + 1), generator=g)
        out.append((seq[:, :-1], seq[:, 1:]))
    return out
