"""zoe's collectives over a torch.distributed process group: host_comm_for().

Under torchrun a program already has a process group (gloo on CPU, nccl on GPU) and no mpirun;
zoe.Engine(model, config, host_comm=host_comm_for()) runs the engine's collectives over it. zoe
asks, on every rank in the same order, for each group it needs (dist.new_group makes them: it is
collective over the whole world), and hands each collective raw device addresses, which become
torch tensors without a copy (tensors.over_address, as the hooks' parameters). On CUDA the collective is
issued under torch.cuda.ExternalStream(zoe's stream), so zoe's stream waits for it.

What torch lacks is made up here: gloo has no reduce_scatter (the send buffer is all-reduced in a
copy and this rank's block kept: more bytes on the wire than zoe counts) and no average (a sum,
divided by the group's size). The reductions add in torch's order (gloo's, NCCL's), not zoe's
pairwise tree: bit-identical to another world size only where that order gives the same sums.
"""

import os

import torch
import torch.distributed as dist

from .._host_comm import HostComm
from ..errors import UsageError
from .tensors import ZOE_DTYPES, over_address

__all__ = ["host_comm_for", "TorchCollectives"]

_TORCH_DTYPES = {name: dtype for dtype, name in ZOE_DTYPES.items()}


def _device(stream):
    """Where zoe's buffers of a collective are: CUDA memory when zoe gave a stream, else host."""
    return torch.device("cpu") if stream is None else torch.device("cuda")


def _bytes(address, nbytes, stream):
    """A uint8 tensor over `nbytes` at `address` (no copy)."""
    return over_address(address, (nbytes,), torch.uint8, _device(stream))


def _view(address, count, dtype, stream):
    return over_address(address, (count,), _TORCH_DTYPES[dtype], _device(stream))


def _overlaps(a, b):
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.nbytes and b0 < a0 + a.nbytes


class _Group:
    """One group zoe asked for: torch's group (GroupMember.NON_GROUP_MEMBER outside it), the global
    ranks of its members in zoe's order, and whether this process is one of them."""

    def __init__(self, pg, ranks, member):
        self.pg = pg
        self.ranks = ranks
        self.member = member
        self.size = len(ranks)
        self.gloo = member and dist.get_backend(pg) == "gloo"


class _on_stream:
    """Issues torch work on zoe's CUDA stream (and its device); nothing on the host device."""

    def __init__(self, stream, tensor):
        self.stream = stream
        self.device = tensor.device

    def __enter__(self):
        if self.stream is None:
            return self
        self._device = torch.cuda.device(self.device)
        self._device.__enter__()
        self._stream = torch.cuda.stream(torch.cuda.ExternalStream(self.stream, device=self.device))
        self._stream.__enter__()
        return self

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        self._stream.__exit__(*exc)
        self._device.__exit__(*exc)
        return False


class TorchCollectives:
    """The collectives zoe._host_comm.HostComm calls, over torch.distributed. `global_ranks[i]` is
    the default group's rank of zoe's world rank i."""

    def __init__(self, global_ranks):
        self.global_ranks = list(global_ranks)

    def create_group(self, world_ranks):
        ranks = [self.global_ranks[r] for r in world_ranks]
        pg = dist.new_group(ranks=ranks)
        return _Group(pg, ranks, dist.get_rank() in ranks)

    def destroy_group(self, group):
        if group.member and dist.is_initialized():
            dist.destroy_process_group(group.pg)

    def all_gather(self, group, send, recv, nbytes, stream):
        if nbytes == 0:
            return
        out = _bytes(recv, nbytes * group.size, stream)
        mine = _bytes(send, nbytes, stream)
        with _on_stream(stream, out):
            if _overlaps(mine, out):  # in place: send is recv's own block
                mine = mine.clone()
            dist.all_gather(list(out.split(nbytes)), mine, group=group.pg)

    def reduce_scatter(self, group, send, recv, count, dtype, op, stream):
        if count == 0:
            return
        whole = _view(send, count * group.size, dtype, stream)
        out = _view(recv, count, dtype, stream)
        mine = group.ranks.index(dist.get_rank())
        with _on_stream(stream, out):
            if group.gloo:
                reduced = whole.clone()
                dist.all_reduce(reduced, op=dist.ReduceOp.SUM, group=group.pg)
                block = reduced[mine * count : (mine + 1) * count]
                out.copy_(block / group.size if op == "mean" else block)
                return
            result = torch.empty_like(out) if _overlaps(whole, out) else out
            torch_op = dist.ReduceOp.AVG if op == "mean" else dist.ReduceOp.SUM
            dist.reduce_scatter_tensor(result, whole, op=torch_op, group=group.pg)
            if result is not out:
                out.copy_(result)

    def all_reduce(self, group, send, recv, count, dtype, op, stream):
        if count == 0:
            return
        out = _view(recv, count, dtype, stream)
        with _on_stream(stream, out):
            if send != recv:
                out.copy_(_view(send, count, dtype, stream))
            if group.gloo:
                dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group.pg)
                if op == "mean":
                    out.div_(group.size)
            else:
                dist.all_reduce(out, op=dist.ReduceOp.AVG if op == "mean" else dist.ReduceOp.SUM, group=group.pg)

    def all_to_all(self, group, send, recv, nbytes, stream):
        if nbytes == 0:
            return
        out = _bytes(recv, nbytes * group.size, stream)
        with _on_stream(stream, out):
            dist.all_to_all_single(out, _bytes(send, nbytes * group.size, stream), group=group.pg)

    def broadcast(self, group, buffer, nbytes, root, stream):
        if nbytes == 0:
            return
        data = _bytes(buffer, nbytes, stream)
        with _on_stream(stream, data):
            dist.broadcast(data, src=group.ranks[root], group=group.pg)

    def point_to_point(self, group, buffer, nbytes, src, dst, stream):
        if nbytes == 0:
            return
        data = _bytes(buffer, nbytes, stream)
        with _on_stream(stream, data):
            if dist.get_rank() == group.ranks[src]:
                dist.send(data, dst=group.ranks[dst], group=group.pg)
            else:
                dist.recv(data, src=group.ranks[src], group=group.pg)

    def barrier(self, group):
        dist.barrier(group=group.pg)


def _ranks_per_node(world_size):
    """torchrun's LOCAL_WORLD_SIZE when it divides the world (ranks fill nodes in blocks), else 0."""
    try:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        return 0
    return local if local > 0 and world_size % local == 0 else 0


def host_comm_for(process_group=None):
    """The host_comm argument of zoe.Engine that runs zoe's collectives over `process_group` (None:
    the default group of torch.distributed.init_process_group). Every rank of the default group
    must make its engine with one (zoe's groups are made with dist.new_group, collective over the
    whole default group), so `process_group` must span it. zoe.UsageError when torch.distributed is
    not initialized or the group does not span the default group."""
    if not dist.is_available() or not dist.is_initialized():
        raise UsageError("host_comm_for: torch.distributed is not initialized (call init_process_group first)")
    world = dist.group.WORLD if process_group is None else process_group
    size = dist.get_world_size(world)
    if size != dist.get_world_size():
        raise UsageError(
            f"host_comm_for: the process group has {size} of the default group's {dist.get_world_size()} "
            "ranks; zoe's groups are made with dist.new_group, which every rank of the default group must call"
        )
    global_ranks = [dist.get_global_rank(world, r) for r in range(size)] if process_group is not None else range(size)
    return HostComm(TorchCollectives(global_ranks), dist.get_rank(world), size, _ranks_per_node(size))
