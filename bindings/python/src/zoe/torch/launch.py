"""How zoe.torch.initialize finds the ranks it trains with, from the launch line alone.

- `mpirun -n N python train.py`: the launcher's environment names the ranks (zoe.launcher_ranks()
  sees world_size > 1) and zoe's own communicator backend (zoe.comm.backend "auto": mpi) talks
  between them; the engine needs nothing from Python.
- `torchrun --nproc_per_node N train.py` (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
  in the environment): zoe runs its collectives over torch.distributed's default process group,
  through the host communicator (zoe.torch.process_group). The script's own
  torch.distributed.init_process_group is used when it made one; else initialize makes it, as
  deepspeed.init_distributed does.
- Neither: one rank.
"""

import os

import zoe

__all__ = ["engine_comm", "init_distributed", "torchrun_world_size"]

_TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_world_size():
    """WORLD_SIZE when this process was started by torchrun (or a launcher setting the same
    variables), else 0. Raises ValueError naming what is missing or malformed when WORLD_SIZE is
    set without the rest."""
    if "WORLD_SIZE" not in os.environ:
        return 0
    missing = [key for key in _TORCHRUN_KEYS if key not in os.environ]
    if missing:
        raise ValueError(
            f"zoe.torch: WORLD_SIZE is set but {', '.join(missing)} is not (a torchrun launch sets "
            f"all of {', '.join(_TORCHRUN_KEYS)})"
        )
    values = {}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        try:
            values[key] = int(os.environ[key])
        except ValueError:
            raise ValueError(f"zoe.torch: environment variable {key}={os.environ[key]!r} is not an integer") from None
    if not 0 <= values["RANK"] < values["WORLD_SIZE"]:
        raise ValueError(f"zoe.torch: RANK={values['RANK']} is outside WORLD_SIZE={values['WORLD_SIZE']}")
    return values["WORLD_SIZE"]


def init_distributed(dist_backend=None, timeout=None, init_method=None):
    """Makes torch.distributed's default process group from torchrun's environment if the script
    has not (deepspeed.init_distributed's role): gloo on the CPU, nccl where CUDA is available,
    unless `dist_backend` names one. Does nothing when one exists or outside a torchrun launch.
    Returns True when a process group is (now) initialised."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("zoe.torch.init_distributed: this torch was built without torch.distributed")
    if dist.is_initialized():
        return True
    if torchrun_world_size() == 0:
        return False
    if dist_backend is None:
        import torch

        dist_backend = "nccl" if torch.cuda.is_available() else "gloo"
    kwargs = {"backend": dist_backend, "init_method": init_method or "env://"}
    if timeout is not None:
        kwargs["timeout"] = timeout
    dist.init_process_group(**kwargs)
    return True


def engine_comm():
    """The zoe.Engine keyword arguments that put the engine on the ranks of this launch:
    {} under mpirun (zoe's mpi backend) or for one rank; {"host_comm": ...} over
    torch.distributed's default group under torchrun (made by init_distributed when the script
    has not). zoe.comm.backend stays the configuration's: the engine refuses a backend other than
    auto or host beside a host_comm, naming it.

    Raises ValueError when both launchers claim the process (mpirun's ranks and a torchrun
    WORLD_SIZE that differ), naming both."""
    launched = zoe.launcher_ranks()
    torchrun = torchrun_world_size()
    if launched.world_size > 1:
        if torchrun and torchrun != launched.world_size:
            raise ValueError(
                f"zoe.torch: mpirun launched {launched.world_size} ranks but WORLD_SIZE={torchrun}; "
                "launch with one of them"
            )
        return {}
    if torchrun <= 1:
        return {}
    init_distributed()
    import torch.distributed as dist

    from zoe.torch.process_group import host_comm_for

    return {"host_comm": host_comm_for(dist.group.WORLD)}
