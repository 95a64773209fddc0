"""A LoRA-style model (frozen base weights) trained with zoe.torch equals torch's training, keeps
its base weights, and zoe plans no gradient or optimizer state for them."""

import copy

import torch
from torch import nn

import zoe.torch
from models import LoRAMLP, regression_batches
from torch_training import assert_losses_close, mse, offload_config, train_torch, train_zoe, with_budget

torch.set_num_threads(1)

STEPS = 20


def lora_model():
    torch.manual_seed(0)
    return LoRAMLP(inputs=16, hidden=64, outputs=8, rank=4)


def trainable(model):
    return [p for p in model.parameters() if p.requires_grad]


def test_lora_equals_torch_and_keeps_the_base(tmp_path):
    model = lora_model()
    reference = copy.deepcopy(model)
    initial = copy.deepcopy(model.state_dict())
    batches = regression_batches(STEPS)
    optimizer = torch.optim.AdamW(trainable(reference), lr=1e-2, weight_decay=0.01)
    want = train_torch(reference, batches, mse, STEPS, optimizer=optimizer)
    config = with_budget(model, offload_config(tmp_path, model, lr=1e-2), model_parameters=trainable(model))
    engine, _, _, _ = zoe.torch.initialize(model=model, model_parameters=trainable(model), config=config)
    with engine:
        got = train_zoe(engine, batches, mse, STEPS)
        state = engine.state_dict()
    assert_losses_close(got, want, rtol=1e-5)
    for name in ("fc1.base.weight", "fc1.base.bias", "fc2.base.weight"):
        assert torch.equal(state[name], initial[name]), name
    assert not torch.equal(state["fc1.lora_b"], initial["fc1.lora_b"])


def optimizer_items(engine):
    """zoe's plan of the engine: bytes of each gradient and optimizer state item."""
    items = engine.zoe_engine.statistics()["footprint"]["items"]
    return {i["what"]: i["bytes"] for i in items if "exp_avg" in i["what"] or i["what"].startswith("gradient in")}


def test_frozen_parameters_have_no_gradient_or_optimizer_state(tmp_path):
    frozen = lora_model()
    # The same trainable parameters in the same modules, without the base layers at all.
    without_base = lora_model()
    for layer in (without_base.fc1, without_base.fc2):
        layer.base = nn.Module()
    plans = []
    for i, model in enumerate((frozen, without_base)):
        swap = tmp_path / str(i)
        swap.mkdir()
        config = with_budget(model, offload_config(swap, model), model_parameters=trainable(model))
        engine, _, _, _ = zoe.torch.initialize(model=model, model_parameters=trainable(model), config=config)
        with engine:
            plans.append(optimizer_items(engine))
            if model is frozen:
                frozen_names = sorted(p.name for p in engine.zoe_engine.parameters if p.frozen)
    assert frozen_names == ["fc1.base.bias", "fc1.base.weight", "fc2.base.bias", "fc2.base.weight"]
    assert plans[0] and plans[0] == plans[1]
