"""The training run test_extras_resume.py kills and resumes: python extras_resume_train.py WORK STEPS SAVE_FROM

Trains tests/models.py's MLP with zoe.torch on NVMe (a DeepSpeed WarmupDecayLR schedule too, so
the restored lr matters), resuming from WORK/checkpoints when a checkpoint is there, and saving
one after every step from SAVE_FROM on. Prints one JSON line per event, flushed: {"step": i,
"loss": x} after step i's update, {"saved": i} once step i's checkpoint is complete; at the end
it writes the engine's state_dict to WORK/final.pt.
"""

import json
import os
import sys

import torch

import zoe.torch
from models import MLP, regression_batches
from torch_training import mse, offload_config, with_budget


def main(work, steps, save_from):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = MLP()
    swap = os.path.join(work, "swap")
    os.makedirs(swap, exist_ok=True)
    scheduler = {"type": "WarmupDecayLR",
                 "params": {"total_num_steps": steps, "warmup_max_lr": 1e-2, "warmup_num_steps": 3}}
    config = with_budget(model, offload_config(swap, model, scheduler=scheduler))
    engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
    checkpoints = os.path.join(work, "checkpoints")
    if os.path.exists(os.path.join(checkpoints, "latest")):
        engine.load_checkpoint(checkpoints)
    batches = regression_batches(steps)
    while engine.global_steps < steps:
        x, y = batches[engine.global_steps]
        loss = mse(engine(x), y)
        engine.backward(loss)
        engine.step()
        print(json.dumps({"step": engine.global_steps, "loss": loss.item()}), flush=True)
        if engine.global_steps >= save_from:
            engine.save_checkpoint(checkpoints)
            print(json.dumps({"saved": engine.global_steps}), flush=True)
    torch.save(engine.state_dict(), os.path.join(work, "final.pt"))
    engine.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
