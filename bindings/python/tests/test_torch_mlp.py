"""An MLP trained with zoe.torch equals the same MLP trained with torch.optim.AdamW, in fp32."""

import copy

import pytest
import torch

import zoe.torch
from models import MLP, regression_batches
from torch_training import (
    assert_losses_close,
    assert_states_on_nvme,
    model_state_bytes,
    mse,
    offload_config,
    train_torch,
    train_zoe,
    with_budget,
)

torch.set_num_threads(1)

STEPS = 20


def small_mlp():
    torch.manual_seed(0)
    return MLP(inputs=16, hidden=64, outputs=8, layers=8)


@pytest.mark.parametrize("gas,clip", [(1, 0.0), (4, 0.0), (1, 0.05)], ids=["plain", "accumulate4", "clip"])
def test_mlp_equals_torch_adamw(tmp_path, gas, clip):
    model = small_mlp()
    reference = copy.deepcopy(model)
    batches = regression_batches(STEPS * gas, batch=8, inputs=16, outputs=8)
    config = with_budget(model, offload_config(tmp_path, model, gas=gas, clip=clip))
    assert config["zoe"]["device"]["budget_bytes"] < model_state_bytes(model) / 4
    norms = []
    want = train_torch(reference, batches, mse, STEPS, gas=gas, clip=clip, norms=norms)
    if clip:
        assert norms and all(norm > clip for norm in norms)  # the clip cuts every step's gradient
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        assert not engine.was_step_applied() and engine.get_global_grad_norm() is None
        got = train_zoe(engine, batches, mse, STEPS, gas=gas)
        assert engine.global_steps == STEPS and engine.micro_steps == STEPS * gas
        assert engine.was_step_applied() and engine.get_global_grad_norm() > 0
        assert_states_on_nvme(engine)
    assert_losses_close(got, want, rtol=1e-5)
