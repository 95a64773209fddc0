"""bf16 and fp16 configurations: the model runs in the 16-bit type, the fp32 masters live in zoe.

Bound, and why. The reference is torch's own mixed-precision recipe with the same arithmetic as
DeepSpeed's and zoe's: fp32 master weights stepped by torch.optim.AdamW, a 16-bit copy of them
that runs forward and backward, its 16-bit gradients handed to the masters as fp32. zoe and the
reference then differ only in AdamW's float rounding (zoe's kernel and torch's round the same
formula differently, ~1e-7 relative on a master). That matters only where a master lies that
close to a rounding boundary of the 16-bit type: its working copy then differs by one 16-bit ulp
(2^-8 relative for bf16, 2^-11 for fp16) and moves the loss by a fraction of that. Over 20 steps of
this model a few weights flip; the losses agree within 1e-4 relative (measured: 2.3e-5 bf16,
4.5e-6 fp16; with 4 micro-batches accumulated in fp32 and a clip that cuts some steps, 2.8e-5 and
7.4e-6). Against plain fp32 training the 16-bit rounding of every weight and activation counts
too; the losses agree within 1e-3 (measured 5.6e-5 bf16, 3.5e-5 fp16; accumulated and clipped
5.5e-5, 1.5e-5). That bf16 run is closer to fp32 than the 1e-4 bound, so the loss alone would not
tell a run that never left fp32: the test asserts the dtype the model ran in as well.
"""

import copy

import pytest
import torch

import zoe.torch
from models import GPT2, LoRAMLP, counting_batches, regression_batches
from torch_training import (
    BETAS,
    EPS,
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
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def train_mixed_precision(model, batches, dtype, gas=1, clip=0.0, norms=None):
    """torch's mixed precision by hand: fp32 masters, a `dtype` model computing; each micro-batch's
    16-bit gradient added into the fp32 master gradient (DeepSpeed accumulates in fp32 too), the
    masters' norm clipped (appended to `norms` when given), then the step."""
    masters = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(masters, lr=1e-3, betas=BETAS, eps=EPS, weight_decay=0.01)
    model.to(dtype)
    losses = []
    for i, (inputs, targets) in enumerate(batches):
        loss = cross_entropy(model(inputs), targets)
        (loss / gas).backward()
        losses.append(loss.item())
        for master, p in zip(masters, model.parameters()):
            master.grad = p.grad.float() if master.grad is None else master.grad + p.grad.float()
            p.grad = None
        if i % gas != gas - 1:
            continue
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(masters, clip)
            if norms is not None:
                norms.append(norm.item())
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            for master, p in zip(masters, model.parameters()):
                p.copy_(master)
    return losses


@pytest.mark.parametrize("gas,clip", [(1, 0.0), (4, 0.35)], ids=["plain", "accumulate4_clip"])
@pytest.mark.parametrize("name", sorted(TYPES))
def test_16_bit_training_tracks_torch(tmp_path, name, gas, clip):
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    fp32_reference, mixed_reference = copy.deepcopy(model), copy.deepcopy(model)
    batches = counting_batches(STEPS * gas)
    fp32 = train_torch(fp32_reference, batches, cross_entropy, STEPS, gas=gas, clip=clip)
    norms = []
    mixed = train_mixed_precision(mixed_reference, batches, TYPES[name], gas=gas, clip=clip, norms=norms)
    if clip:
        assert min(norms) < clip < max(norms), norms

    config = with_budget(model, offload_config(tmp_path, model, gas=gas, clip=clip, **{name: {"enabled": True}}))
    assert config["zoe"]["device"]["budget_bytes"] < model_state_bytes(model) / 4
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    dtypes = set()
    model.h[0].attn.c_attn.register_forward_pre_hook(lambda m, _: dtypes.add(m.weight.dtype))
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS, gas=gas)
        assert engine.skipped_steps == 0
        assert_states_on_nvme(engine)
        masters = engine.state_dict()
    assert dtypes == {TYPES[name]}  # the model ran in the 16-bit type ...
    assert masters["h.0.attn.c_attn.weight"].dtype == torch.float32  # ... over fp32 masters
    assert got != fp32
    assert_losses_close(got, mixed, rtol=1e-4)
    assert_losses_close(got, fp32, rtol=1e-3)


def test_model_already_in_bf16_is_taken_exactly(tmp_path):
    # Its values need converting to fp32: written one parameter at a time after the engine is made.
    torch.manual_seed(0)
    model = LoRAMLP(inputs=16, hidden=64, outputs=8).to(torch.bfloat16)
    want = {k: v.float() for k, v in model.state_dict().items()}
    trainable = [p for p in model.parameters() if p.requires_grad]
    config = with_budget(model, offload_config(tmp_path, model, bf16={"enabled": True}), model_parameters=trainable)
    engine, _, _, _ = zoe.torch.initialize(model=model, model_parameters=trainable, config=config)
    with engine:
        state = engine.state_dict()
        assert all(torch.equal(state[k], want[k]) for k in want)
        (x, y), = regression_batches(1)
        engine.backward(torch.nn.functional.mse_loss(engine(x.bfloat16()).float(), y))
        engine.step()
        after = engine.state_dict()
    assert torch.equal(after["fc1.base.weight"], want["fc1.base.weight"])  # frozen
    assert not torch.equal(after["fc1.lora_b"], want["fc1.lora_b"])
