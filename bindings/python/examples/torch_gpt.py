"""Train a GPT-2-shaped PyTorch model with zoe, its states on NVMe, on a device budget a fraction
of their size.

    python bindings/python/examples/torch_gpt.py            # a small model, seconds on a CPU
    python bindings/python/examples/torch_gpt.py --layers 12 --hidden 768 --vocab 50257   # GPT-2 small

The model is plain torch.nn (zoe.torch._gpt: embeddings, LayerNorm, causal self-attention, MLP,
a head tied to the token embedding), randomly initialised and built under zoe.torch.Init so it
never sits whole in host memory. The text is synthetic (every sequence follows one hidden rule,
so the loss falls): nothing is downloaded. The training loop is DeepSpeed's, with
deepspeed.initialize replaced by zoe.torch.initialize. The swap files go to a temporary folder
(--folder to choose one on a fast disk), removed at the end. --reference also trains the same
model from the same weights and batches with torch.optim.AdamW in ordinary memory (the same
schedule and clipping) and prints its loss beside zoe's, with their relative difference.
"""

import argparse
import shutil
import tempfile

import torch

import zoe.torch
from zoe.torch import schedulers
from zoe.torch._gpt import GPT2

MIB = 1 << 20


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    parser.add_argument("--hidden", type=int, default=256, help="model width (default 256)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    parser.add_argument("--vocab", type=int, default=128, help="vocabulary size (default 128)")
    parser.add_argument("--seq", type=int, default=64, help="tokens per sequence (default 64)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per step (default 4)")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps (default 30)")
    parser.add_argument("--lr", type=float, default=3e-3, help="AdamW's peak lr, warmed up over 5 steps (default 3e-3)")
    parser.add_argument("--folder", help="where the swap files go (default: a new temporary folder)")
    parser.add_argument("--device", default="auto", choices=("auto", "host", "cuda"), help="zoe's device")
    parser.add_argument(
        "--reference", action="store_true", help="also train with torch.optim.AdamW in memory, to compare"
    )
    return parser.parse_args()


def synthetic_batch(generator, args):
    """Sequences that follow one rule, token[i + 1] = (5 * token[i] + 3) mod vocab, from random starts."""
    start = torch.randint(0, args.vocab, (args.batch, 1), generator=generator)
    tokens = [start]
    for _ in range(args.seq):
        tokens.append((tokens[-1] * 5 + 3) % args.vocab)
    sequence = torch.cat(tokens, dim=1)
    return sequence[:, :-1], sequence[:, 1:]


def config_for(args, folder):
    return {
        "train_micro_batch_size_per_gpu": args.batch,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": args.lr, "weight_decay": 0.01}},
        "scheduler": {
            "type": "WarmupLR",
            "params": {"warmup_min_lr": 0.0, "warmup_max_lr": args.lr, "warmup_num_steps": 5, "warmup_type": "linear"},
        },
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "nvme", "nvme_path": folder, "max_in_cpu": 0},
            "offload_optimizer": {"device": "nvme", "nvme_path": folder},
        },
        "zoe": {"device": {"kind": args.device}},
    }


def build(args):
    torch.manual_seed(0)
    return GPT2(vocab=args.vocab, context=args.seq, width=args.hidden, heads=args.heads, layers=args.layers)


def reference_losses(args, config, batches):
    """Plain torch on the same weights (the same seed, built without Init) and batches: AdamW with
    the configuration's hyperparameters, its schedule and its clipping, in ordinary memory."""
    model = build(args)
    hyper = config["optimizer"]["params"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=hyper["lr"], weight_decay=hyper["weight_decay"])
    schedule = schedulers.build(config["scheduler"], optimizer)
    losses = []
    for x, y in batches:
        loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config["gradient_clipping"])
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
        losses.append(loss.item())
    return losses


def size_to_model(config, model):
    """zoe's defaults, as DeepSpeed's, are sized for billions of parameters: a model this small would
    sit whole in the gather and bucket memory they ask for. Sized to the largest set of parameters
    one module registers (fetched together), only a module or two is on the device at once."""
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    zero = config["zero_optimization"]
    zero["offload_param"]["buffer_size"] = largest  # each swap buffer holds the largest module
    zero.update(
        {
            "sub_group_size": largest,  # the optimizer steps this many elements at a time
            "reduce_bucket_size": largest,  # gradient buckets
            "allgather_bucket_size": largest,
            "stage3_prefetch_bucket_size": largest,
            "stage3_max_live_parameters": 2 * largest,  # gathered parameters on the device at once
            "stage3_param_persistence_threshold": 0,  # none stays gathered between uses
        }
    )


def main():
    args = arguments()
    folder = args.folder or tempfile.mkdtemp(prefix="zoe-example-")
    try:
        config = config_for(args, folder)
        with zoe.torch.Init(config=config):
            model = build(args)
        count = sum(p.numel() for p in model.parameters())
        size_to_model(config, model)
        # The device budget: what zoe's plan asks for this model (a module or two at a time), plus
        # a little for the device's rounding of each allocation.
        plan = zoe.torch.footprint_plan(model, config)
        budget = plan["device_bytes"] + MIB // 4
        config["zoe"]["device"]["budget_bytes"] = budget
        states = 16 * count  # fp32 parameter, gradient and Adam's two moments
        print(
            f"GPT-2-shaped model: {args.layers} layers x {args.hidden}, {count / 1e6:.1f}M parameters, "
            f"{states / MIB:.1f} MiB of model states; device budget {budget / MIB:.1f} MiB "
            f"({states / budget:.1f}x smaller); swap files in {folder}"
        )

        generator = torch.Generator().manual_seed(1)
        batches = [synthetic_batch(generator, args) for _ in range(args.steps)]
        reference = reference_losses(args, config, batches) if args.reference else None
        engine, optimizer, _, scheduler = zoe.torch.initialize(model=model, config=config)
        with engine:
            worst = 0.0
            for step, (x, y) in enumerate(batches, 1):
                x, y = x.to(engine.device), y.to(engine.device)
                loss = engine(x, y)
                engine.backward(loss)
                engine.step()
                line = f"step {step:3d}  loss {loss.item():.4f}  lr {optimizer.param_groups[0]['lr']:.2e}"
                if reference:
                    difference = abs(loss.item() - reference[step - 1]) / abs(reference[step - 1])
                    worst = max(worst, difference)
                    line += f"  torch {reference[step - 1]:.4f}  relative difference {difference:.1e}"
                print(line, flush=True)
            if reference:
                print(f"zoe against plain torch: largest relative loss difference {worst:.1e}")
            stats = engine.zoe_engine.statistics()
            memory = stats["footprint"]["device"]
            print(
                f"moved: NVMe read {stats['nvme_read_bytes'] / MIB:.0f} MiB, written "
                f"{stats['nvme_write_bytes'] / MIB:.0f} MiB, host<->device {stats['host_device_copy_bytes'] / MIB:.0f} MiB; "
                f"device peak {memory['peak_bytes'] / MIB:.1f} MiB of the {memory['budget_bytes'] / MIB:.1f} MiB budget"
            )
    finally:
        if args.folder is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
