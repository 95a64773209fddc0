"""A GPT-2-shaped model (tied head) trained with zoe.torch equals torch.optim.AdamW's training."""

import copy

import pytest
import torch

import zoe.torch
from models import GPT2, token_batches
from torch_training import (
    assert_losses_close,
    assert_states_on_nvme,
    cross_entropy,
    model_state_bytes,
    offload_config,
    train_torch,
    train_zoe,
    with_budget,
)

torch.set_num_threads(1)

STEPS = 20


def tiny_gpt():
    torch.manual_seed(0)
    return GPT2(vocab=64, context=16, width=32, heads=2, layers=2)


# This model's gradient norms run 0.29-0.42 over the 20 steps: a clip of 0.35 cuts some steps and
# leaves others, so both sides of zoe's threshold are compared (0.5 once here cut none).
@pytest.mark.parametrize("gas,clip", [(1, 0.0), (4, 0.35)], ids=["plain", "accumulate4_clip"])
def test_gpt_equals_torch_adamw(tmp_path, gas, clip):
    model = tiny_gpt()
    reference = copy.deepcopy(model)
    batches = token_batches(STEPS * gas)
    config = with_budget(model, offload_config(tmp_path, model, gas=gas, clip=clip))
    assert config["zoe"]["device"]["budget_bytes"] < model_state_bytes(model) / 4
    norms = []
    want = train_torch(reference, batches, cross_entropy, STEPS, gas=gas, clip=clip, norms=norms)
    if clip:
        assert min(norms) < clip < max(norms), norms
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS, gas=gas)
        assert_states_on_nvme(engine)
    assert_losses_close(got, want, rtol=1e-5)


def test_tied_parameter_is_stored_once_and_gets_both_gradients(tmp_path):
    model = tiny_gpt()
    reference = copy.deepcopy(model)
    (idx, targets), = token_batches(1)
    cross_entropy(reference(idx), targets).backward()
    engine, _, _, _ = zoe.torch.initialize(model=model, config=offload_config(tmp_path, model))
    with engine:
        engine.backward(cross_entropy(engine(idx), targets))
        names = [p.name for p in engine.zoe_engine.parameters]
        # One zoe parameter for wte.weight / lm_head.weight, in a zoe module of its own.
        assert names.count("wte.weight") == 1 and "lm_head.weight" not in names
        for name, p in reference.named_parameters():
            got = engine.zoe_engine.read_state(names.index(name), "gradient")
            torch.testing.assert_close(torch.from_numpy(got), p.grad, rtol=1e-5, atol=1e-7, msg=name)
