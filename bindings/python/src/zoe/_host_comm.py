"""zoe_host_comm (zoe.h) in ctypes: the struct, its callback types, and HostComm, which fills the
struct from a Python object's collectives.

zoe calls the callbacks on its own threads (the engine's stream workers on the host device), so
each is wrapped to catch everything it raises, BaseException included: a Python exception must
never unwind into C. A failure becomes a zoe_status (a zoe.Error's own; ZOE_ERROR_TIMEOUT for
TimeoutError, ZOE_ERROR_MEMORY for MemoryError, ZOE_ERROR_USAGE for ValueError and TypeError,
ZOE_ERROR_COMM otherwise) and "<exception class>: <text>" in zoe's message buffer, which zoe
reports naming the collective, the group and the rank.

The object behind HostComm gives, in zoe's order and with zoe's arguments (group ranks for root,
src and dst; raw addresses as ints; native_stream an int, or None on the host device):
    create_group(world_ranks: list[int]) -> group (any Python object; zoe keeps an id)
    destroy_group(group)
    all_gather(group, send, recv, nbytes, stream)
    reduce_scatter(group, send, recv, count, dtype, op, stream)   dtype "fp32" | "fp16" | "bf16"
    all_reduce(group, send, recv, count, dtype, op, stream)       op "sum" | "mean"
    all_to_all(group, send, recv, nbytes, stream)
    broadcast(group, buffer, nbytes, root, stream)
    point_to_point(group, buffer, nbytes, src, dst, stream)
    barrier(group)
(zoe/torch/process_group.py gives torch.distributed's.)
"""

import builtins
import ctypes
import threading
from ctypes import POINTER, c_int, c_size_t, c_uint32, c_void_p

from . import _capi, errors

__all__ = ["MESSAGE_CAPACITY", "HostCommStruct", "HostComm"]

# zoe.h's ZOE_HOST_COMM_MESSAGE_CAPACITY, and the names of its zoe_dtype and zoe_reduce_op values.
MESSAGE_CAPACITY = 1024
_DTYPES = {value: name for name, value in _capi.DTYPES.items()}
_OPS = {0: "sum", 1: "mean"}

# zoe_status (*)(void* user, ..., char* message, size_t message_capacity): enums are C ints, the
# message buffer a plain address.
CREATE_GROUP = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint32), c_size_t, POINTER(c_void_p), c_void_p, c_size_t)
DESTROY_GROUP = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)
ALL_GATHER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t, c_void_p, c_void_p, c_size_t)
REDUCE = ctypes.CFUNCTYPE(
    c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p, c_void_p, c_size_t
)
ALL_TO_ALL = ALL_GATHER
BROADCAST = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t, c_uint32, c_void_p, c_void_p, c_size_t)
POINT_TO_POINT = ctypes.CFUNCTYPE(
    c_int, c_void_p, c_void_p, c_void_p, c_size_t, c_uint32, c_uint32, c_void_p, c_void_p, c_size_t
)
BARRIER = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t)


class HostCommStruct(ctypes.Structure):
    """zoe_host_comm, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("user", c_void_p),
        ("rank", c_uint32),
        ("world_size", c_uint32),
        ("ranks_per_node", c_uint32),
        ("create_group", CREATE_GROUP),
        ("destroy_group", DESTROY_GROUP),
        ("all_gather", ALL_GATHER),
        ("reduce_scatter", REDUCE),
        ("all_reduce", REDUCE),
        ("all_to_all", ALL_TO_ALL),
        ("broadcast", BROADCAST),
        ("point_to_point", POINT_TO_POINT),
        ("barrier", BARRIER),
    ]


def _status_of(exc):
    if isinstance(exc, errors.Error) and exc.status > 0:
        return exc.status
    if isinstance(exc, builtins.TimeoutError):
        return errors.TimeoutError.status
    if isinstance(exc, builtins.MemoryError):
        return errors.MemoryError.status
    if isinstance(exc, (ValueError, TypeError)):
        return errors.UsageError.status
    return errors.CommError.status


def _write_message(address, capacity, text):
    if not address or capacity == 0:
        return
    data = text.encode("utf-8", "replace")[: capacity - 1]
    ctypes.memmove(address, data, len(data))
    ctypes.memset(address + len(data), 0, 1)


def _guarded(body):
    """body(*args) as a callback: ZOE_SUCCESS, or the status of what it raised with its message."""

    def callback(*args):
        message, capacity = args[-2], args[-1]
        try:
            body(*args[:-2])
            return 0  # ZOE_SUCCESS
        except BaseException as exc:  # noqa: BLE001: nothing may unwind into C
            try:
                _write_message(message, capacity, f"{type(exc).__name__}: {exc}")
                return _status_of(exc)
            except BaseException:  # noqa: BLE001
                return errors.CommError.status

    return callback


def _address(value):
    return value or 0  # ctypes gives NULL as None


class HostComm:
    """The zoe_host_comm of `collectives` (the object described above) on world rank `rank` of
    `world_size`, `ranks_per_node` to a node (0: one node). Pass it as zoe.Engine(host_comm=...):
    `_as_parameter_` is the struct, and this object keeps the callbacks and the groups alive, so
    hold it (the engine does) until the engine is closed."""

    def __init__(self, collectives, rank, world_size, ranks_per_node=0):
        self.collectives = collectives
        self._groups = {}  # id -> the collectives' group object
        self._next_id = 1  # 0 would read as NULL
        self._lock = threading.Lock()
        c = collectives

        def group(handle):
            return self._groups[_address(handle)]

        def create_group(_user, ranks, count, out):
            made = c.create_group([ranks[i] for i in range(count)])
            with self._lock:
                gid = self._next_id
                self._next_id += 1
                self._groups[gid] = made
            out[0] = gid

        def destroy_group(_user, handle):
            with self._lock:
                made = self._groups.pop(_address(handle))
            c.destroy_group(made)

        def all_gather(_user, g, send, recv, nbytes, stream):
            c.all_gather(group(g), _address(send), _address(recv), nbytes, stream)

        def reduce_scatter(_user, g, send, recv, count, dtype, op, stream):
            c.reduce_scatter(group(g), _address(send), _address(recv), count, _DTYPES[dtype], _OPS[op], stream)

        def all_reduce(_user, g, send, recv, count, dtype, op, stream):
            c.all_reduce(group(g), _address(send), _address(recv), count, _DTYPES[dtype], _OPS[op], stream)

        def all_to_all(_user, g, send, recv, nbytes, stream):
            c.all_to_all(group(g), _address(send), _address(recv), nbytes, stream)

        def broadcast(_user, g, buffer, nbytes, root, stream):
            c.broadcast(group(g), _address(buffer), nbytes, root, stream)

        def point_to_point(_user, g, buffer, nbytes, src, dst, stream):
            c.point_to_point(group(g), _address(buffer), nbytes, src, dst, stream)

        def barrier(_user, g):
            c.barrier(group(g))

        self._as_parameter_ = HostCommStruct(
            ctypes.sizeof(HostCommStruct),
            None,
            rank,
            world_size,
            ranks_per_node,
            CREATE_GROUP(_guarded(create_group)),
            DESTROY_GROUP(_guarded(destroy_group)),
            ALL_GATHER(_guarded(all_gather)),
            REDUCE(_guarded(reduce_scatter)),
            REDUCE(_guarded(all_reduce)),
            ALL_TO_ALL(_guarded(all_to_all)),
            BROADCAST(_guarded(broadcast)),
            POINT_TO_POINT(_guarded(point_to_point)),
            BARRIER(_guarded(barrier)),
        )

    @property
    def groups(self):
        """The groups zoe asked for and has not yet destroyed."""
        with self._lock:
            return list(self._groups.values())
