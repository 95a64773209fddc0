"""The optimizer step inside backward under an lr schedule: engine.backward() announces the
param_groups' settings (zoe_announce_step_groups), so every shard stepped ahead with them is
committed instead of dropped, and the losses still equal torch.optim.AdamW's."""

import copy

import pytest
import torch

import zoe
import zoe.torch
from models import GPT2, token_batches
from torch_training import BETAS, EPS, assert_losses_close, cross_entropy, offload_config, train_torch, train_zoe
from zoe.torch import schedulers

torch.set_num_threads(1)

STEPS = 8


def model_and_reference():
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    return model, copy.deepcopy(model)


def no_decay_groups(model):
    return [
        {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0},
    ]


def warm_up(step):
    """LambdaLR's factor: the lr changes at each of the first 5 steps."""
    return min(1.0, (step + 1) / 5)


def every_speculation_committed(engine):
    speculation = engine.zoe_engine.statistics()["optimizer"]["speculation"]
    assert speculation["speculated"] > 0
    assert speculation["dropped"] == 0
    assert speculation["committed"] == speculation["speculated"]


def test_lambda_lr_commits_every_speculation_and_equals_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS)
    ref_opt = torch.optim.AdamW(no_decay_groups(reference), lr=2e-3, betas=BETAS, eps=EPS)
    want = train_torch(reference, batches, cross_entropy, STEPS, optimizer=ref_opt,
                       scheduler=torch.optim.lr_scheduler.LambdaLR(ref_opt, warm_up))

    optimizer = torch.optim.AdamW(no_decay_groups(model), lr=2e-3, betas=BETAS, eps=EPS)
    engine, _, _, _ = zoe.torch.initialize(
        model=model, optimizer=optimizer, config=offload_config(tmp_path, model),
        lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, warm_up),
    )
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS)
        every_speculation_committed(engine)
    assert_losses_close(got, want, rtol=1e-5)


def test_warmup_lr_block_with_accumulation_commits_every_speculation_and_equals_torch(tmp_path):
    model, reference = model_and_reference()
    batches = token_batches(STEPS * 2)
    block = {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 3e-3, "warmup_num_steps": 5,
                                            "warmup_type": "linear"}}
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=3e-3, betas=BETAS, eps=EPS, weight_decay=0.01)
    want = train_torch(reference, batches, cross_entropy, STEPS, gas=2, optimizer=ref_opt,
                       scheduler=schedulers.build(block, ref_opt))

    config = offload_config(tmp_path, model, lr=3e-3, gas=2, scheduler=block)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS, gas=2)
        every_speculation_committed(engine)
    assert_losses_close(got, want, rtol=1e-5)


def test_core_announce_step_refuses_what_is_not_a_pair_per_group(tmp_path):
    model, _ = model_and_reference()
    engine, _, _, _ = zoe.torch.initialize(model=model, config=offload_config(tmp_path, model))
    with engine:
        with pytest.raises(zoe.UsageError, match=r"announce_step: groups\[0\] is 0.1, not an \(lr, weight_decay\)"):
            engine.zoe_engine.announce_step([0.1])
        with pytest.raises(zoe.UsageError, match="count is 2, but the model has 1 parameter groups"):
            engine.zoe_engine.announce_step([(0.1, 0.0), (0.1, 0.0)])
        with pytest.raises(zoe.UsageError, match="announce_step: lr -1"):
            engine.zoe_engine.announce_step([(-1.0, 0.0)])
