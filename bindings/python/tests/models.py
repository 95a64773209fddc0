"""Small torch.nn models shared by the zoe.torch tests (and by whoever needs a realistic model).

They are written the way a PyTorch user writes them, not for zoe: GPT2 (zoe.torch._gpt) has token and position
embeddings, LayerNorm, causal self-attention with a mask buffer, a GELU MLP and a head tied to the
token embedding (one nn.Parameter in two modules); MLP's layers compute ``x @ W.t()`` themselves,
so autograd saves a view of each weight for backward; LoRAMLP freezes its base weights as LoRA
fine-tuning does; SharedLayerMLP runs one layer twice per forward. Every size is a constructor
argument and the defaults are tiny, for tests.
"""

import math

import torch
from torch import nn

# GPT-2's shape lives in the package, for the benchmark and the example as well.
from zoe.torch._gpt import GPT2, Block, CausalSelfAttention, token_batches  # noqa: F401


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
    """One hidden layer applied twice per forward, another layer between its uses (as weight
    sharing across layers does): a module called several times per step."""

    def __init__(self, inputs=16, hidden=32, outputs=8):
        super().__init__()
        self.inp = Dense(inputs, hidden)
        self.shared = Dense(hidden, hidden)
        self.mid = Dense(hidden, hidden)
        self.out = Dense(hidden, outputs)

    def forward(self, x):
        x = torch.tanh(self.inp(x))
        x = torch.tanh(self.shared(x))
        x = torch.tanh(self.mid(x))
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


class ExternalHeadLM(nn.Module):
    """A language model whose head is the token embedding's weight used in the model's own forward
    (``x @ self.wte.weight.t()``), not through a module of its own: a parameter used outside its
    module's forward, with the model holding no parameter itself. ``Mixer`` reads it inside a child
    too: the position embedding's weight added in another module's forward."""

    class Mixer(nn.Module):
        def __init__(self, width, positions):
            super().__init__()
            self.positions = [positions]  # not a submodule: only its weight is used here
            self.ln = nn.LayerNorm(width)
            self.fc = nn.Linear(width, width)

        def forward(self, x):
            x = x + self.positions[0].weight[: x.shape[1]]
            return x + torch.tanh(self.fc(self.ln(x)))

    def __init__(self, vocab=64, context=16, width=32):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.mixer = self.Mixer(width, self.wpe)
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx):
        return self.mixer(self.wte(idx)) @ self.wte.weight.t()


def counting_batches(count, batch=4, context=16, vocab=64, seed=0):
    """Like token_batches, but learnable: each row counts up from a random start by a random stride
    (mod vocab), so the next token follows from the two before it and the loss falls fast."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        stride = torch.randint(1, 4, (batch, 1), generator=g)
        seq = (start + stride * torch.arange(context + 1)) % vocab
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
