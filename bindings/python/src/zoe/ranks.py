"""zoe.Ranks and zoe.launcher_ranks(): where this process stands among data-parallel ranks."""

import ctypes
from collections import namedtuple

from . import _capi

__all__ = ["Ranks", "launcher_ranks"]

Ranks = namedtuple("Ranks", "rank world_size ranks_per_node node local_rank nodes")
Ranks.__doc__ = "A zoe_ranks: rank r is on node r // ranks_per_node with local rank r % ranks_per_node."


def from_struct(ranks):
    return Ranks(ranks.rank, ranks.world_size, ranks.ranks_per_node, ranks.node, ranks.local_rank, ranks.nodes)


def launcher_ranks():
    """This process's ranks as its launcher (mpirun, PMI) announces them in the environment;
    Ranks(0, 1, 1, 0, 0, 1) without one (zoe_launcher_ranks)."""
    ranks = _capi.Ranks()
    _capi.call("zoe_launcher_ranks", ctypes.byref(ranks))
    return from_struct(ranks)
