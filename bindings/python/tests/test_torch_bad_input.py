"""Bad input to zoe.torch: a zoe exception naming the parameter, module or call, and the engine
(or the model, when initialize refused it) usable afterwards."""

import pytest
import torch
from torch import nn

import zoe
import zoe.torch
from models import MLP, regression_batches
from torch_training import mse, offload_config, with_budget

torch.set_num_threads(1)


def mlp():
    torch.manual_seed(0)
    return MLP(inputs=16, hidden=32, outputs=8, layers=3)


@pytest.fixture
def engine(tmp_path):
    model = mlp()
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    with engine:
        yield engine


def one_step(engine):
    (x, y), = regression_batches(1)
    loss = mse(engine(x), y)
    engine.backward(loss)
    engine.step()
    return loss.item()


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64])
def test_unsupported_dtype_names_the_parameter_and_leaves_the_model(tmp_path, dtype):
    model = mlp()
    model.layers[1].extra = nn.Parameter(torch.ones(3, dtype=dtype), requires_grad=False)
    before = model.layers[0].weight.detach().clone()
    with pytest.raises(zoe.UsageError, match=r"'layers\.1\.extra' is torch\.(float64|int64)"):
        zoe.torch.initialize(model=model, config=offload_config(tmp_path, model))
    assert torch.equal(model.layers[0].weight, before)  # nothing was taken from the model
    del model.layers[1].extra
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    with engine:
        assert one_step(engine) > 0


def test_forward_outside_the_engine_names_the_module(engine):
    (x, _), = regression_batches(1)
    with pytest.raises(zoe.UsageError, match=r"module 'layers\.0' \(Dense\) ran outside the zoe engine"):
        engine.module(x)
    assert one_step(engine) > 0


def test_step_before_backward_names_the_call(engine):
    with pytest.raises(zoe.UsageError, match=r"engine\.step\(\) after 0 engine\.backward\(\) calls"):
        engine.step()
    assert engine.global_steps == 0
    one_step(engine)
    assert engine.global_steps == 1


def test_step_without_backward_at_the_accumulation_boundary(tmp_path):
    model = mlp()
    config = with_budget(model, offload_config(tmp_path, model, gas=2))
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        (x, y), = regression_batches(1)
        engine.backward(mse(engine(x), y))
        engine.step()  # micro-step 1 of 2: no optimizer step
        with pytest.raises(zoe.UsageError, match=r"engine\.step\(\) after 1 engine\.backward\(\) calls.*micro-step 2"):
            engine.step()
        engine.backward(mse(engine(x), y))
        engine.step()
        assert engine.global_steps == 1


def test_backward_without_forward_names_the_call(engine):
    with pytest.raises(zoe.UsageError, match=r"engine\.backward\(loss\): no training forward"):
        engine.backward(torch.ones((), requires_grad=True))
    assert one_step(engine) > 0


def test_parameter_given_new_data_names_it(engine):
    weight = engine.module.layers[1].weight
    weight.data = torch.zeros(5, 5)
    (x, _), = regression_batches(1)
    with pytest.raises(zoe.UsageError, match=r"parameter 'layers\.1\.weight' was given new data of shape \(5, 5\)"):
        engine(x)
    weight.data = torch.empty(0)
    assert one_step(engine) > 0  # the failed forward left nothing fetched


def test_parameter_replaced_names_it(engine):
    layer = engine.module.layers[2]
    original = layer.bias
    layer.bias = nn.Parameter(torch.zeros(8))
    (x, _), = regression_batches(1)
    with pytest.raises(zoe.UsageError, match=r"parameter 'layers\.2\.bias': module 'layers\.2''s 'bias' was replaced"):
        engine(x)
    layer.bias = original
    assert one_step(engine) > 0


def test_trainable_parameter_in_no_group_names_it(tmp_path):
    model = mlp()
    with pytest.raises(zoe.UsageError, match=r"parameter 'layers\.2\.bias' requires grad but is in no optimizer"):
        zoe.torch.initialize(model=model, model_parameters=list(model.parameters())[:-1],
                             config=offload_config(tmp_path, model))


def test_unsupported_optimizer_is_refused(tmp_path):
    model = mlp()
    with pytest.raises(zoe.UsageError, match=r"optimizer SGD is not supported"):
        zoe.torch.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                             config=offload_config(tmp_path, model))


def test_bad_scheduler_block_names_the_key(tmp_path):
    model = mlp()
    config = offload_config(tmp_path, model, scheduler={"type": "WarmupLR", "params": {"warmup_max_lrr": 1.0}})
    with pytest.raises(zoe.ConfigError, match=r"warmup_max_lrr"):
        zoe.torch.initialize(model=model, config=config)
    assert model.layers[0].weight.numel() > 0
