"""engine.state_dict(): torch's keys and values after the same training; checkpoints."""

import copy

import pytest
import torch

import zoe
import zoe.torch
from models import GPT2, token_batches
from torch_training import cross_entropy, offload_config, train_torch, train_zoe, with_budget

torch.set_num_threads(1)

STEPS = 5


def test_state_dict_equals_torch_after_the_same_steps(tmp_path):
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    reference = copy.deepcopy(model)
    batches = token_batches(STEPS)
    train_torch(reference, batches, cross_entropy, STEPS)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    with engine:
        train_zoe(engine, batches, cross_entropy, STEPS)
        state = engine.state_dict()
    want = reference.state_dict()
    assert list(state) == list(want)  # the tied names both, the mask buffers too
    assert state["wte.weight"] is state["lm_head.weight"]
    for key, value in want.items():
        assert state[key].dtype == value.dtype and state[key].device.type == "cpu", key
        torch.testing.assert_close(state[key], value, rtol=1e-5, atol=1e-6, msg=key)


def test_checkpoint_resumes_training_exactly(tmp_path):
    batches = token_batches(2 * STEPS)

    def build():
        torch.manual_seed(0)
        model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
        config = with_budget(model, offload_config(tmp_path / "swap", model))
        return zoe.torch.initialize(
            model=model, config=config,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s)),
        )[0]

    (tmp_path / "swap").mkdir()
    with build() as engine:
        train_zoe(engine, batches[:STEPS], cross_entropy, STEPS)
        assert engine.save_checkpoint(tmp_path / "ckpt", client_state={"epoch": 7})
        want = train_zoe(engine, batches[STEPS:], cross_entropy, STEPS)
        want_lr = engine.get_lr()
    with build() as engine:
        path, client_state = engine.load_checkpoint(tmp_path / "ckpt")
        assert path == str(tmp_path / "ckpt" / f"step-{STEPS}")
        assert client_state == {"epoch": 7}
        assert engine.global_steps == STEPS and engine.lr_scheduler.last_epoch == STEPS
        got = train_zoe(engine, batches[STEPS:], cross_entropy, STEPS)
        assert engine.get_lr() == want_lr
    assert got == want  # bit for bit


def test_load_state_dict_writes_zoe_and_names_a_bad_key(tmp_path):
    torch.manual_seed(0)
    trained = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    train_torch(trained, token_batches(2), cross_entropy, 2)
    want = trained.state_dict()
    torch.manual_seed(1)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    with engine:
        before = engine.state_dict()
        bad = dict(want, **{"h.1.ln_2.bias": torch.zeros(3)})
        with pytest.raises(zoe.UsageError, match=r"'h\.1\.ln_2\.bias' has shape \(3,\)"):
            engine.load_state_dict(bad)
        for key, value in engine.state_dict().items():
            assert torch.equal(value, before[key]), key  # nothing was written
        engine.load_state_dict(want)
        for key, value in engine.state_dict().items():
            assert torch.equal(value, want[key]), key
        (idx, targets), = token_batches(1, seed=3)
        loss = cross_entropy(engine(idx), targets)
        engine.backward(loss)
        assert loss.item() == pytest.approx(cross_entropy(trained(idx), targets).item(), rel=1e-6)


def test_a_checkpoint_named_by_tag_loads_though_it_is_not_the_latest(tmp_path):
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    (tmp_path / "swap").mkdir()
    config = with_budget(model, offload_config(tmp_path / "swap", model))
    batches = token_batches(4)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        train_zoe(engine, batches[:2], cross_entropy, 2)
        engine.save_checkpoint(tmp_path / "ckpt", tag="early")
        early = engine.state_dict()
        train_zoe(engine, batches[2:], cross_entropy, 2)
        engine.save_checkpoint(tmp_path / "ckpt")  # step-4, now the latest
        assert not torch.equal(engine.state_dict()["h.0.attn.c_attn.weight"], early["h.0.attn.c_attn.weight"])
        path, _ = engine.load_checkpoint(tmp_path / "ckpt", tag="early")
        assert path == str(tmp_path / "ckpt" / "early")
        assert engine.global_steps == 2
        for key, value in engine.state_dict().items():
            assert torch.equal(value, early[key]), key
        path, _ = engine.load_checkpoint(tmp_path / "ckpt")
        assert path == str(tmp_path / "ckpt" / "step-4") and engine.global_steps == 4
