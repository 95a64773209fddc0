"""A forward under torch.no_grad() between steps is an inference: zoe's inference fetch hands the
parameters out, outputs equal torch's, and no micro-batch opens, so training goes on as before."""

import copy

import pytest
import torch

import zoe.torch
from models import GPT2, counting_batches
from torch_training import BETAS, EPS, cross_entropy, offload_config, train_torch, train_zoe, with_budget

torch.set_num_threads(1)


def test_no_grad_forward_is_an_inference_between_steps(tmp_path):
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    reference = copy.deepcopy(model)
    batches = counting_batches(4)
    (probe, _), = counting_batches(1, seed=1)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3, betas=BETAS, eps=EPS, weight_decay=0.01)
    train_torch(reference, batches[:2], cross_entropy, 2, optimizer=optimizer)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    with engine:
        train_zoe(engine, batches[:2], cross_entropy, 2)
        engine.eval()
        zero_copy = []

        def check(module, _args):  # after zoe's pre-hook: the parameters are zoe's fetched memory
            zero_copy.extend(p.data_ptr() == engine.parameter_address(p) for p in module.parameters(recurse=False))

        hook = model.h[0].attn.c_attn.register_forward_pre_hook(check)
        with torch.no_grad():
            logits = engine(probe)
        hook.remove()
        assert zero_copy and all(zero_copy)  # an inference fetch, not a copy of the masters
        assert all(p.numel() == 0 for p in model.parameters())  # nothing left behind
        engine.train()
        reference.eval()
        with torch.no_grad():
            torch.testing.assert_close(logits, reference(probe), rtol=1e-5, atol=1e-6)
        reference.train()
        # No micro-batch was opened: the next step is the step's first micro-batch, as in torch.
        want = train_torch(reference, batches[2:], cross_entropy, 2, optimizer=optimizer)
        assert train_zoe(engine, batches[2:], cross_entropy, 2) == pytest.approx(want, rel=1e-5)
