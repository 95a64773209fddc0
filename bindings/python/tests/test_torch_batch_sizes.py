"""DeepSpeed's batch arithmetic in zoe.torch: train_batch_size = train_micro_batch_size_per_gpu x
gradient_accumulation_steps x world size, the key not written derived (by zoe's engine, for its
world size) and a triple that does not multiply out refused naming the keys and values."""

import copy

import pytest
import torch

import zoe
import zoe.torch
from models import MLP, regression_batches
from torch_training import assert_losses_close, mse, offload_config, train_torch, train_zoe, with_budget

torch.set_num_threads(1)


def mlp():
    torch.manual_seed(0)
    return MLP(inputs=16, hidden=32, outputs=8, layers=2)


def batch_config(tmp_path, model, **batch):
    """offload_config with its batch keys replaced by `batch`."""
    config = offload_config(tmp_path, model)
    del config["train_micro_batch_size_per_gpu"], config["gradient_accumulation_steps"]
    config.update(batch)
    return config


def test_gradient_accumulation_steps_is_derived_from_the_batch_sizes(tmp_path):
    model = mlp()
    reference = copy.deepcopy(model)
    config = with_budget(model, batch_config(tmp_path, model, train_batch_size=8, train_micro_batch_size_per_gpu=2))
    batches = regression_batches(8, batch=2)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        assert engine.gradient_accumulation_steps() == 4
        assert engine.zoe_engine.batch_sizes() == (8, 2, 4)
        losses = train_zoe(engine, batches, mse, steps=2, gas=4)
        assert engine.global_steps == 2  # one optimizer step per 4 micro-batches
    assert_losses_close(losses, train_torch(reference, batches, mse, steps=2, gas=4), rtol=1e-5)


def test_the_data_loader_takes_the_derived_micro_batch(tmp_path):
    model = mlp()
    config = with_budget(model, batch_config(tmp_path, model, train_batch_size=12, gradient_accumulation_steps=3))
    data = torch.utils.data.TensorDataset(torch.randn(24, 16), torch.randn(24, 8))
    engine, _, loader, _ = zoe.torch.initialize(model=model, config=config, training_data=data)
    with engine:
        assert loader.batch_size == 4
        assert engine.gradient_accumulation_steps() == 3


def test_batch_sizes_that_do_not_multiply_out_are_refused_naming_each(tmp_path):
    model = mlp()
    before = model.layers[0].weight.detach().clone()
    config = batch_config(tmp_path, model, train_batch_size=8, train_micro_batch_size_per_gpu=2,
                          gradient_accumulation_steps=3)
    message = (r"train_batch_size 8 is not train_micro_batch_size_per_gpu 2 x gradient_accumulation_steps 3 x "
               r"world size 1 = 6")
    with pytest.raises(zoe.ConfigError, match=message):
        zoe.torch.initialize(model=model, config=config)
    assert torch.equal(model.layers[0].weight, before)  # the model keeps its values
    # A derived value rounded down is named with its arithmetic; the plan derives for its world size.
    config = batch_config(tmp_path, model, train_batch_size=8, train_micro_batch_size_per_gpu=2)
    assert zoe.torch.footprint_plan(model, config, world_size=2)["device_bytes"] > 0
    with pytest.raises(zoe.ConfigError, match=r"gradient_accumulation_steps derived as .* = 8 / 2 / 3 rounded down"):
        zoe.torch.footprint_plan(model, config, world_size=3)
