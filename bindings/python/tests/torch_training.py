"""What the zoe.torch tests share: an NVMe-offload configuration on a device budget picked from
zoe's footprint plan, and the same training loop run with zoe and with plain torch."""

import copy

import torch
import torch.nn.functional as F

import zoe.torch

BETAS = (0.9, 0.999)
EPS = 1e-8


def _own_elements(module):
    # Each parameter rounded up to the 4 KiB zoe aligns it to.
    return sum(-(-p.numel() // 1024) * 1024 for p in module.parameters(recurse=False))


def largest_module(model):
    """Elements of the largest set of parameters one module registers itself."""
    return max(_own_elements(m) for m in model.modules())


def largest_fetch(model):
    """Elements zoe.torch holds fetched at once at most in a forward: a module's own parameters
    with those of its ancestors (a parent's stay fetched while its children run)."""

    def held(module, above):
        here = above + _own_elements(module)
        return max([here] + [held(child, here) for child in module.children()])

    return held(model, 0)


def offload_config(swap_dir, model, lr=1e-3, weight_decay=0.01, gas=1, clip=0.0, **extra):
    """Parameters and optimizer states on NVMe under swap_dir, on the host device, with buffers and
    one gradient bucket sized for `model`'s largest module and the gathered-parameter limit for what
    it holds at once (zoe's defaults are sized for billions of parameters); `extra` merged at the top (fp16 / bf16 blocks, scheduler,
    zoe.activations, ...)."""
    largest = largest_module(model)
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": clip,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": lr, "betas": list(BETAS), "eps": EPS, "weight_decay": weight_decay},
        },
        "zero_optimization": {
            "stage": 3,
            "offload_param": {
                "device": "nvme",
                "nvme_path": str(swap_dir),
                "buffer_count": 4,
                "buffer_size": largest,
                "max_in_cpu": 0,
            },
            "offload_optimizer": {"device": "nvme", "nvme_path": str(swap_dir), "buffer_count": 2},
            "overlap_comm": False,
            "sub_group_size": largest,
            "reduce_bucket_size": largest,
            "allgather_bucket_size": largest,
            "stage3_max_live_parameters": 2 * largest_fetch(model),
            "stage3_prefetch_bucket_size": largest,
            "stage3_param_persistence_threshold": 0,
            "stage3_max_reuse_distance": 0,
        },
        "aio": {"block_size": 65536, "queue_depth": 4},
        "zoe": {"device": {"kind": "host"}},
    }
    for key, value in extra.items():
        if key == "zoe":
            config["zoe"].update(value)
        else:
            config[key] = value
    return config


def model_state_bytes(model):
    """Bytes of the model states zoe keeps for training in fp32: parameter, gradient, two moments."""
    return 16 * sum(p.numel() for p in model.parameters() if p.requires_grad)


def with_budget(model, config, extra_bytes=0, **plan_args):
    """config with zoe.device.budget_bytes set to what zoe's plan asks for the device, plus a margin
    for the host device's rounding of each allocation, plus extra_bytes (what the plan does not
    count: an activation being loaded)."""
    plan = zoe.torch.footprint_plan(model, config, **plan_args)
    out = copy.deepcopy(config)
    out["zoe"]["device"]["budget_bytes"] = plan["device_bytes"] + (16 << 10) + extra_bytes
    return out


def mse(out, y):
    return F.mse_loss(out.float(), y)


def cross_entropy(logits, targets):
    """A language model's loss: logits (batch, tokens, vocab) against token ids (batch, tokens)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def train_torch(model, batches, loss_fn, steps, lr=1e-3, weight_decay=0.01, gas=1, clip=0.0, optimizer=None,
                scheduler=None, norms=None):
    """The reference: torch.optim.AdamW in ordinary memory; the loss of every micro-batch. With
    clipping, each step's gradient norm before clipping is appended to `norms` when given (a test
    asserts with them that the clip bit, so that zoe's clipping is compared, not assumed)."""
    if optimizer is None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=BETAS, eps=EPS, weight_decay=weight_decay)
    losses = []
    for step in range(steps):
        for k in range(gas):
            inputs, target = batches[step * gas + k]
            loss = loss_fn(model(inputs), target)
            (loss / gas).backward()
            losses.append(loss.item())
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if norms is not None:
                norms.append(norm.item())
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
    return losses


def assert_states_on_nvme(engine):
    """The configuration's NVMe placement took effect: zoe's plan puts the masters and both Adam
    moments on NVMe, and the training read parameters from it and read and wrote optimizer states."""
    figures = engine.zoe_engine.statistics()
    planned = {item["what"] for item in figures["footprint"]["items"]}
    assert {"master on nvme", "exp_avg on nvme", "exp_avg_sq on nvme"} <= planned, sorted(planned)
    assert figures["parameters"]["nvme_read_bytes"] > 0, figures["parameters"]
    assert figures["optimizer"]["nvme_read_bytes"] > 0 and figures["optimizer"]["nvme_write_bytes"] > 0


def train_zoe(engine, batches, loss_fn, steps, gas=1):
    """The same loop through zoe.torch, DeepSpeed's way: engine.step() after every backward."""
    losses = []
    for step in range(steps):
        for k in range(gas):
            inputs, target = batches[step * gas + k]
            loss = loss_fn(engine(inputs), target)
            engine.backward(loss)
            engine.step()
            losses.append(loss.item())
    return losses


def assert_losses_close(got, want, rtol):
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        relative = abs(a - b) / abs(b)
        assert relative <= rtol, f"micro-batch {i}: zoe {a!r}, torch {b!r} (relative {relative:.3g})"
