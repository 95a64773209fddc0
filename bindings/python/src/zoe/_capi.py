"""ctypes declarations of zoe.h: its structs (field for field, struct_size first) and the
prototype (argtypes, restype) of every function, bound on first use.

The library is loaded on the first call, not at import, so that `import zoe` works anywhere (and
zoe.torch can be imported to read its docs) and the error of a missing library comes from the call
that needed it. A function the loaded library lacks (a library older than this header) raises
zoe.UsageError naming the function when it is called; the others keep working.
"""

import ctypes
import threading
from ctypes import POINTER, c_char_p, c_double, c_float, c_int, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from . import _library
from .errors import UsageError, error_for_status

# ---- enums (C enums are ints) ---------------------------------------------------------------------

DEVICE_KINDS = {"auto": 0, "host": 1, "cuda": 2}
DTYPES = {"fp32": 0, "fp16": 1, "bf16": 2}
INITS = {"data": 0, "zeros": 1, "uniform": 2, "normal": 3}
PASSES = {"forward": 0, "backward": 1}
STATES = {"parameter": 0, "gradient": 1, "exp_avg": 2, "exp_avg_sq": 3}
COPY_KINDS = {"host_to_device": 0, "device_to_host": 1, "device_to_device": 2}

# ---- structs --------------------------------------------------------------------------------------


class _Sized(ctypes.Structure):
    """A zoe struct: struct_size is set to this version's size, as the ZOE_..._INIT macros do."""

    def __init__(self, **fields):
        super().__init__(struct_size=ctypes.sizeof(type(self)), **fields)


class DeviceOptions(_Sized):
    _fields_ = [("struct_size", c_size_t), ("kind", c_int), ("budget_bytes", c_uint64), ("cuda_ordinal", c_int)]


class ParameterDesc(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("ndim", c_size_t),
        ("shape", POINTER(c_uint64)),
        ("dtype", c_int),
        ("init", c_int),
        ("data", POINTER(c_float)),
        ("scale", c_float),
        ("seed", c_uint64),
        ("frozen", c_int),
        ("group", c_uint32),
    ]


class EngineDesc(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("config_json", c_char_p),
        ("config_path", c_char_p),
        ("model", c_void_p),
        ("device", c_void_p),
        ("config_overrides", c_char_p),
        ("host_comm", c_void_p),  # const zoe_host_comm* (its struct: zoe/_host_comm.py)
    ]


class Footprint(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("device_bytes", c_uint64),
        ("pinned_bytes", c_uint64),
        ("host_bytes", c_uint64),
        ("disk_bytes", c_uint64),
        ("activation_host_bytes", c_uint64),
        ("activation_nvme_bytes", c_uint64),
        ("activation_prefetch_bytes", c_uint64),
    ]


class BatchSizes(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("train_batch_size", c_uint64),
        ("train_micro_batch_size_per_gpu", c_uint64),
        ("gradient_accumulation_steps", c_uint64),
    ]


class Ranks(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("rank", c_uint32),
        ("world_size", c_uint32),
        ("ranks_per_node", c_uint32),
        ("node", c_uint32),
        ("local_rank", c_uint32),
        ("nodes", c_uint32),
    ]


class CommTraffic(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("intra_node_bytes", c_uint64),
        ("inter_node_bytes", c_uint64),
        ("collectives", c_uint64),
    ]


class StepResult(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("skipped", c_int),
        ("loss_scale", c_double),
        ("grad_norm", c_double),
        ("clip_coefficient", c_double),
        ("optimizer_steps", c_int64),
    ]


class GroupHyper(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("lr", c_double),
        ("weight_decay", c_double),
        ("beta1", c_double),
        ("beta2", c_double),
        ("eps", c_double),  # 0: the configuration's betas and eps
    ]


class StageTimes(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("param_io_s", c_double),
        ("adam_s", c_double),
        ("optimizer_io_s", c_double),
        ("io_s", c_double),
        ("io_read_bytes", c_uint64),
        ("io_write_bytes", c_uint64),
    ]


# ---- prototypes -----------------------------------------------------------------------------------

_status = c_int
_handle = c_void_p
_out_handle = POINTER(c_void_p)

PROTOTYPES = {
    "zoe_status_string": (c_char_p, [c_int]),
    "zoe_last_error": (c_char_p, []),
    "zoe_version": (c_char_p, []),
    "zoe_device_create": (_status, [POINTER(DeviceOptions), _out_handle]),
    "zoe_device_destroy": (_status, [_handle]),
    "zoe_device_get_kind": (_status, [_handle, POINTER(c_int)]),
    "zoe_device_memory": (_status, [_handle, POINTER(c_uint64), POINTER(c_uint64), POINTER(c_uint64)]),
    "zoe_stream_create": (_status, [_handle, _out_handle]),
    "zoe_stream_destroy": (_status, [_handle]),
    "zoe_stream_synchronize": (_status, [_handle]),
    "zoe_stream_native": (_status, [_handle, _out_handle]),
    "zoe_device_allocate": (_status, [_handle, c_size_t, _handle, _out_handle]),
    "zoe_device_free": (_status, [_handle, c_void_p, c_size_t, _handle]),
    "zoe_copy_async": (_status, [_handle, c_void_p, c_void_p, c_size_t, c_int, _handle]),
    "zoe_initializer_fill": (_status, [c_int, c_float, c_uint64, c_uint64, POINTER(c_float), c_size_t]),
    "zoe_model_create": (_status, [_out_handle]),
    "zoe_model_destroy": (_status, [_handle]),
    "zoe_model_add_module": (_status, [_handle, c_char_p, POINTER(c_uint32)]),
    "zoe_model_add_parameter": (_status, [_handle, c_uint32, POINTER(ParameterDesc), POINTER(c_uint32)]),
    "zoe_engine_create": (_status, [POINTER(EngineDesc), _out_handle]),
    "zoe_engine_destroy": (_status, [_handle]),
    "zoe_engine_device": (_status, [_handle, _out_handle]),
    "zoe_engine_batch_sizes": (_status, [_handle, POINTER(BatchSizes)]),
    "zoe_footprint_plan": (_status, [POINTER(EngineDesc), c_uint32, POINTER(Footprint)]),
    "zoe_launcher_ranks": (_status, [POINTER(Ranks)]),
    "zoe_engine_ranks": (_status, [_handle, POINTER(Ranks)]),
    "zoe_all_reduce_sum": (_status, [_handle, POINTER(c_double), c_size_t]),
    "zoe_engine_traffic": (_status, [_handle, POINTER(CommTraffic)]),
    "zoe_begin_micro_batch": (_status, [_handle]),
    "zoe_end_micro_batch": (_status, [_handle]),
    "zoe_fetch": (_status, [_handle, c_uint32, c_int, _handle]),
    "zoe_release": (_status, [_handle, c_uint32, _handle]),
    "zoe_parameter_address": (_status, [_handle, c_uint32, _out_handle]),
    "zoe_module_gradients": (_status, [_handle, c_uint32, _handle, POINTER(c_void_p), c_size_t]),
    "zoe_reduce_gradients": (_status, [_handle, c_uint32, _handle]),
    "zoe_activation_save": (_status, [_handle, c_void_p, c_size_t, _handle, POINTER(c_uint64)]),
    "zoe_activation_load": (_status, [_handle, c_uint64, _handle, _out_handle]),
    "zoe_activation_free": (_status, [_handle, c_uint64, _handle]),
    "zoe_loss_scale": (_status, [_handle, POINTER(c_double)]),
    "zoe_step": (_status, [_handle, c_double, POINTER(StepResult)]),
    "zoe_step_groups": (_status, [_handle, POINTER(GroupHyper), c_size_t, POINTER(StepResult)]),
    "zoe_announce_step_groups": (_status, [_handle, POINTER(GroupHyper), c_size_t]),
    "zoe_read_state": (_status, [_handle, c_uint32, c_int, POINTER(c_float), c_size_t]),
    "zoe_write_state": (_status, [_handle, c_uint32, c_int, POINTER(c_float), c_size_t]),
    "zoe_parameter_numel": (_status, [_handle, c_uint32, POINTER(c_uint64)]),
    "zoe_checkpoint_save": (_status, [_handle, c_char_p, c_char_p]),
    "zoe_checkpoint_load": (_status, [_handle, c_char_p, c_char_p]),
    "zoe_checkpoint_save_client": (_status, [_handle, c_char_p, c_char_p, c_void_p, c_size_t]),
    "zoe_checkpoint_client": (_status, [_handle, c_void_p, c_size_t, POINTER(c_size_t)]),
    "zoe_checkpoint_groups": (_status, [_handle, POINTER(GroupHyper), c_size_t]),
    "zoe_statistics": (_status, [_handle, c_char_p, c_size_t, POINTER(c_size_t)]),
    "zoe_measure_stages": (_status, [_handle, POINTER(StageTimes)]),
}


class _Missing:
    """Stands for a function the loaded library does not export, or one this package has no
    prototype for (never called without one: ctypes would guess its argument types)."""

    def __init__(self, name, path):
        self._name = name
        self._path = path

    def __call__(self, *args):
        if self._name not in PROTOTYPES:
            raise UsageError(f"{self._name}: this zoe package's zoe.h does not declare this function yet")
        raise UsageError(
            f"{self._name}: the loaded libzoe_c ({self._path}) does not export this function; "
            "it is older than this zoe package: rebuild it, or point ZOE_LIBRARY at a newer one"
        )


class _Library:
    """libzoe_c with every prototype of PROTOTYPES applied; attributes are its functions."""

    def __init__(self):
        cdll, self.path = _library.load()
        for name, (restype, argtypes) in PROTOTYPES.items():
            try:
                fn = getattr(cdll, name)
            except AttributeError:
                setattr(self, name, _Missing(name, self.path))
                continue
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name, fn)

    def __getattr__(self, name):
        # Only names without a prototype get here.
        return _Missing(name, self.path)


_lib = None
_lib_lock = threading.Lock()


def lib():
    """The loaded library (loaded on the first call; zoe._library.LibraryNotFoundError if none)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Library()
    return _lib


def last_error():
    text = lib().zoe_last_error()
    return text.decode("utf-8", "replace") if text else ""


def call(name, *args):
    """Calls zoe function `name`; raises the exception of its status, with zoe_last_error()'s text,
    when it fails. zoe_last_error() is thread-local and read on the calling thread right after."""
    status = getattr(lib(), name)(*args)
    if status != 0:
        raise error_for_status(status, last_error() or f"{name} failed with status {status}")


def float_pointer(array):
    """A float* to a float32 numpy array's data (the array must outlive the call)."""
    return array.ctypes.data_as(POINTER(c_float))


def encode(text, what):
    """`text` as the NUL-terminated UTF-8 C string zoe reads; None stays NULL."""
    if text is None:
        return None
    if isinstance(text, bytes):
        raw = text
    else:
        raw = str(text).encode("utf-8")
    if b"\0" in raw:
        raise UsageError(f"{what} holds a NUL character: {text!r}")
    return raw
