"""The data-parallel run test_extras_ranks.py launches: python extras_ranks_train.py OUT STEPS [script-group]

Trains tests/models.py's MLP with zoe.torch on however many ranks the launch gives (mpirun:
zoe's mpi backend; torchrun: torch.distributed through zoe's host communicator; neither: one),
each rank on its own equal share of every global batch of 8 rows. Rank 0 writes OUT (JSON): the
loss of each step averaged over the ranks, and the engine's state_dict as lists.

With script-group (under torchrun), the script makes torch.distributed's process group itself
before initialize, as a DeepSpeed script calling init_process_group does, and uses it after the
engine is closed: zoe runs on that group and leaves it to the script.
"""

import json
import os
import sys

import torch

import zoe.torch
from models import MLP, regression_batches
from torch_training import mse, offload_config, with_budget

_GLOBAL_BATCH = 8


def main(out, steps, script_group=False):
    torch.set_num_threads(1)
    if script_group:
        torch.distributed.init_process_group("gloo")
    torch.manual_seed(0)
    model = MLP()
    swap = os.path.join(os.path.dirname(out), "swap")
    os.makedirs(swap, exist_ok=True)
    config = offload_config(swap, model, clip=1.0)
    world = int(os.environ.get("WORLD_SIZE", 0)) or zoe.launcher_ranks().world_size
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, config, world_size=world))
    ranks = engine.zoe_engine.ranks()
    share = _GLOBAL_BATCH // ranks.world_size
    losses = []
    for x, y in regression_batches(steps, batch=_GLOBAL_BATCH):
        rows = slice(ranks.rank * share, (ranks.rank + 1) * share)
        loss = mse(engine(x[rows]), y[rows])
        engine.backward(loss)
        engine.step()
        losses.append(float(engine.zoe_engine.all_reduce_sum([loss.item()])[0]) / ranks.world_size)
    state = {name: value.tolist() for name, value in engine.state_dict().items()}
    if ranks.rank == 0:
        with open(out, "w", encoding="utf-8") as handle:
            json.dump({"world_size": ranks.world_size, "losses": losses, "state": state}, handle)
    engine.close()
    if script_group:
        # The script's group outlives the engine: a collective on it after close still works.
        total = torch.ones(1)
        torch.distributed.all_reduce(total)
        assert total.item() == ranks.world_size, total
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:] == ["script-group"])
