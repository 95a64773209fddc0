"""Parameter groups (the no-decay split) with torch's LambdaLR and with DeepSpeed's scheduler block
train as torch.optim.AdamW does with the same groups and schedule."""

import copy

import pytest
import torch

import zoe
import zoe.torch
from models import GPT2, token_batches
from torch_training import (
    BETAS,
    EPS,
    assert_losses_close,
    cross_entropy,
    offload_config,
    train_torch,
    train_zoe,
    with_budget,
)
from zoe.torch import schedulers

torch.set_num_threads(1)

STEPS = 20


def no_decay_groups(model, weight_decay=0.1):
    """The usual split: matrices decay, biases and LayerNorm weights do not."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def warmup_then_decay(step):
    return min(1.0, (step + 1) / 5) * 0.9 ** max(0, step - 5)


def model_and_reference():
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    return model, copy.deepcopy(model)


def test_no_decay_groups_and_lambda_lr_equal_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS)
    ref_opt = torch.optim.AdamW(no_decay_groups(reference), lr=2e-3, betas=BETAS, eps=EPS)
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, warmup_then_decay)
    want = train_torch(reference, batches, cross_entropy, STEPS, optimizer=ref_opt, scheduler=ref_sched)

    optimizer = torch.optim.AdamW(no_decay_groups(model), lr=2e-3, betas=BETAS, eps=EPS)
    config = with_budget(model, offload_config(tmp_path, model), optimizer=optimizer)
    engine, zoe_optimizer, _, scheduler = zoe.torch.initialize(
        model=model,
        optimizer=optimizer,
        config=config,
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warmup_then_decay),
    )
    with engine:
        assert [g["weight_decay"] for g in zoe_optimizer.param_groups] == [0.1, 0.0]
        got = train_zoe(engine, batches, cross_entropy, STEPS)
        assert engine.get_lr() == ref_sched.get_last_lr()
        assert scheduler.last_epoch == STEPS
    assert_losses_close(got, want, rtol=1e-5)


def test_lr_set_by_hand_between_steps_equals_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS)
    lrs = [1e-3 * (1 + (i % 3)) for i in range(STEPS)]

    ref_opt = torch.optim.AdamW(reference.parameters(), lr=lrs[0], betas=BETAS, eps=EPS, weight_decay=0.01)
    want = []
    for i, (x, y) in enumerate(batches):
        for g in ref_opt.param_groups:
            g["lr"] = lrs[i]
        want += train_torch(reference, [(x, y)], cross_entropy, 1, optimizer=ref_opt)

    config = with_budget(model, offload_config(tmp_path, model))
    engine, optimizer, _, _ = zoe.torch.initialize(model=model, config=config)
    got = []
    with engine:
        for i, batch in enumerate(batches):
            optimizer.param_groups[0]["lr"] = lrs[i]
            got += train_zoe(engine, [batch], cross_entropy, 1)
    assert_losses_close(got, want, rtol=1e-5)


def test_deepspeed_scheduler_block_with_group_dicts_equals_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS * 2)
    block = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3,
                                                 "warmup_num_steps": 5, "total_num_steps": STEPS}}
    ref_opt = torch.optim.AdamW(no_decay_groups(reference), lr=3e-3, betas=BETAS, eps=EPS)
    ref_sched = schedulers.build(block, ref_opt)
    want = train_torch(reference, batches, cross_entropy, STEPS, gas=2, optimizer=ref_opt, scheduler=ref_sched)

    config = offload_config(tmp_path, model, lr=3e-3, gas=2, scheduler=block)
    engine, _, _, scheduler = zoe.torch.initialize(model=model, model_parameters=no_decay_groups(model), config=config)
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS, gas=2)
        # Stepped once per optimizer step (at the accumulation boundary), not per micro-batch.
        assert scheduler.last_batch_iteration == ref_sched.last_batch_iteration
        assert engine.get_lr() == [g["lr"] for g in ref_opt.param_groups]
    assert_losses_close(got, want, rtol=1e-5)


def own_betas_groups(model):
    """The no-decay split with betas and eps of each group's own."""
    decay, rest = no_decay_groups(model)
    decay.update(betas=(0.8, 0.95), eps=1e-6)
    rest.update(betas=(0.5, 0.9), eps=1e-4)
    return [decay, rest]


def test_groups_with_their_own_betas_and_eps_equal_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS)
    half = STEPS // 2
    ref_opt = torch.optim.AdamW(own_betas_groups(reference), lr=2e-3, betas=BETAS, eps=EPS)
    want = train_torch(reference, batches[:half], cross_entropy, half, optimizer=ref_opt)
    # Changed between steps, as a scheduler cycling momentum (DeepSpeed's OneCycle) does.
    ref_opt.param_groups[0]["betas"] = (0.85, 0.99)
    ref_opt.param_groups[1]["eps"] = 1e-5
    want += train_torch(reference, batches[half:], cross_entropy, STEPS - half, optimizer=ref_opt)

    optimizer = torch.optim.AdamW(own_betas_groups(model), lr=2e-3, betas=BETAS, eps=EPS)
    config = with_budget(model, offload_config(tmp_path, model), optimizer=optimizer)
    engine, zoe_optimizer, _, _ = zoe.torch.initialize(model=model, optimizer=optimizer, config=config)
    with engine:
        assert [g["betas"] for g in zoe_optimizer.param_groups] == [(0.8, 0.95), (0.5, 0.9)]
        got = train_zoe(engine, batches[:half], cross_entropy, half)
        zoe_optimizer.param_groups[0]["betas"] = (0.85, 0.99)
        zoe_optimizer.param_groups[1]["eps"] = 1e-5
        got += train_zoe(engine, batches[half:], cross_entropy, STEPS - half)
    assert_losses_close(got, want, rtol=1e-5)


def test_group_dicts_with_their_own_betas_and_eps_equal_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS)
    ref_opt = torch.optim.AdamW(own_betas_groups(reference), lr=2e-3, betas=BETAS, eps=EPS)
    want = train_torch(reference, batches, cross_entropy, STEPS, optimizer=ref_opt)
    config = offload_config(tmp_path, model, lr=2e-3, weight_decay=0.0)
    engine, _, _, _ = zoe.torch.initialize(model=model, model_parameters=own_betas_groups(model), config=config)
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS)
    assert_losses_close(got, want, rtol=1e-5)


def test_a_beta_the_optimizer_cannot_use_is_refused_naming_the_group(tmp_path):
    model, _ = model_and_reference()
    engine, optimizer, _, _ = zoe.torch.initialize(
        model=model, model_parameters=no_decay_groups(model), config=with_budget(model, offload_config(tmp_path, model))
    )
    with engine:
        optimizer.param_groups[1]["betas"] = (0.9, 1.0)
        (x, y), = token_batches(1)
        engine.backward(cross_entropy(engine(x), y))
        with pytest.raises(zoe.UsageError, match=r"betas\[1\] 1 of parameter group 1"):
            engine.step()
