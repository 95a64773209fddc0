"""zoe.activations: autograd's saved tensors go through zoe's activation store between forward
and backward (spilling to NVMe past the host share), and training is unchanged."""

import copy

import torch

import zoe.torch
from models import GPT2, counting_batches
from torch_training import assert_losses_close, cross_entropy, offload_config, train_torch, train_zoe, with_budget

torch.set_num_threads(1)

STEPS = 5


def test_saved_tensors_go_through_zoe_and_training_is_unchanged(tmp_path):
    torch.manual_seed(0)
    model = GPT2(vocab=64, context=16, width=32, heads=2, layers=2)
    reference = copy.deepcopy(model)
    batches = counting_batches(STEPS)
    want = train_torch(reference, batches, cross_entropy, STEPS)
    # A host share smaller than one micro-batch's activations: the rest spill to NVMe.
    config = offload_config(tmp_path, model, zoe={"activations": {"host_bytes": 64 << 10, "nvme_bytes": 1 << 20}})
    # The budget holds the activation being loaded back (zoe's plan counts only its prefetch share).
    config = with_budget(model, config, extra_bytes=64 << 10)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config, activation_min_bytes=4096)
    with engine:
        got = train_zoe(engine, batches, cross_entropy, STEPS)
        figures = engine.zoe_engine.statistics()["activations"]
    assert figures["saves"] > 0 and figures["loads"] == figures["saves"]
    assert figures["nvme_write_bytes"] > 0
    assert_losses_close(got, want, rtol=1e-5)
