"""Small torch.nn models shared by the zoe.torch tests (and by whoever needs a realistic model).

They are written the way a PyTorch user writes them, not for zoe: GPT2 has token and position
embeddings, LayerNorm, causal self-attention with a mask buffer, a GELU MLP and a head tied to the
token embedding (one nn.Parameter in two modules); MLP's layers compute ``x @ W.t()`` themselves,
so autograd saves a view of each weight for backward; LoRAMLP freezes its base weights as LoRA
fine-tuning does; SharedLayerMLP runs one layer twice per forward. Every size is a constructor
argument and the defaults are tiny, for tests.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


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


class Dense(nn.Module):
    """A linear layer that computes ``x @ W.t()`` itself: autograd saves the view ``W.t()``."""

    def __init__(self, inputs, outputs):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(outputs, inputs))
        self.bias = nn.Parameter(torch.empty(outputs))
        bound = 1 / math.sqrt(inputs)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return x @ self.weight.t() + self.bias


class MLP(nn.Module):
    def __init__(self, inputs=16, hidden=32, outputs=8, layers=3):
        super().__init__()
        widths = [inputs] + [hidden] * (layers - 1) + [outputs]
        self.layers = nn.ModuleList(Dense(a, b) for a, b in zip(widths, widths[1:]))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


class SharedLayerMLP(nn.Module):
    """One hidden layer applied twice per forward: a module called several times per step."""

    def __init__(self, inputs=16, hidden=32, outputs=8):
        super().__init__()
        self.inp = Dense(inputs, hidden)
        self.shared = Dense(hidden, hidden)
        self.out = Dense(hidden, outputs)

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        x = torch.tanh(self.shared(x))
        x = torch.tanh(self.shared(x))
        return self.out(x)


class LoRALinear(nn.Module):
    """A frozen base layer plus a trainable low-rank update, as LoRA fine-tuning adds it."""

    def __init__(self, inputs, outputs, rank=4):
        super().__init__()
        self.base = nn.Linear(inputs, outputs)
        self.base.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.randn(rank, inputs) / math.sqrt(inputs))
        self.lora_b = nn.Parameter(torch.randn(outputs, rank) * 0.01)

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t()) @ self.lora_b.t()


class LoRAMLP(nn.Module):
    def __init__(self, inputs=16, hidden=32, outputs=8, rank=4):
        super().__init__()
        self.fc1 = LoRALinear(inputs, hidden, rank)
        self.fc2 = LoRALinear(hidden, outputs, rank)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def token_batches(count, batch=4, context=16, vocab=64, seed=0):
    """``count`` (inputs, targets) pairs of random token ids, the targets the inputs shifted by one."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        seq = torch.randint(0, vocab, (batch, context + 1), generator=g)
        out.append((seq[:, :-1], seq[:, 1:]))
    return out


def regression_batches(count, batch=8, inputs=16, outputs=8, seed=0):
    """``count`` (x, y) pairs: y a fixed random smooth function of x plus noise."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(inputs, outputs, generator=g) / math.sqrt(inputs)
    out = []
    for _ in range(count):
        x = torch.randn(batch, inputs, generator=g)
        out.append((x, torch.sin(x @ w) + 0.01 * torch.randn(batch, outputs, generator=g)))
    return out
