"""zoe.Device and zoe.Stream: the compute device zoe runs on, its streams and its memory."""

import ctypes

from . import _capi, _handles
from .errors import UsageError

__all__ = ["Device", "Stream"]

_KIND_NAMES = {value: name for name, value in _capi.DEVICE_KINDS.items()}


def _stream_handle(stream):
    """The C handle of an optional Stream (None: the device's default stream)."""
    if stream is None:
        return None
    if not isinstance(stream, Stream):
        raise UsageError(f"stream must be a zoe.Stream or None, not {type(stream).__name__}")
    return stream._require_open()


class Device(_handles.Handle):
    """A device (zoe_device_create): kind "auto" (CUDA when usable, else the host device; the
    environment variable ZOE_DEVICE overrides), "host" (host memory under a hard budget) or
    "cuda". budget_bytes is the host device's budget (0: ZOE_DEVICE_BUDGET, else half of memory).
    close() (or leaving a `with` block) destroys it; every engine and stream on it must be closed
    first. An engine's own device (Engine(..., device=None).device) is borrowed: it closes with
    the engine, and its close() does nothing."""

    _destroy = "zoe_device_destroy"

    def __init__(self, kind="auto", budget_bytes=0, cuda_ordinal=0):
        if kind not in _capi.DEVICE_KINDS:
            raise UsageError(f"Device kind {kind!r} is not one of {sorted(_capi.DEVICE_KINDS)}")
        if int(budget_bytes) < 0:
            raise UsageError(f"Device budget_bytes {budget_bytes} is negative")
        options = _capi.DeviceOptions(
            kind=_capi.DEVICE_KINDS[kind], budget_bytes=int(budget_bytes), cuda_ordinal=int(cuda_ordinal)
        )
        handle = ctypes.c_void_p()
        _capi.call("zoe_device_create", ctypes.byref(options), ctypes.byref(handle))
        self._handle = handle.value
        self._owner = None
        _handles.register(self, _handles.DEVICE)

    @classmethod
    def _borrowed(cls, handle, owner):
        """The device `owner` (an Engine) opened itself; valid while the owner is open."""
        device = cls.__new__(cls)
        device._handle = handle
        device._owner = owner
        return device

    def _require_open(self):
        if self._owner is not None and self._owner.closed:
            raise UsageError("this zoe.Device belonged to an engine that is closed")
        return super()._require_open()

    @property
    def closed(self):
        return super().closed or (self._owner is not None and self._owner.closed)

    @property
    def kind(self):
        """"host" or "cuda"."""
        kind = ctypes.c_int()
        _capi.call("zoe_device_get_kind", self._require_open(), ctypes.byref(kind))
        return _KIND_NAMES.get(kind.value, str(kind.value))

    def memory(self):
        """(current, peak, budget): device memory in use, the most ever in use, the budget, bytes."""
        current, peak, budget = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
        _capi.call(
            "zoe_device_memory",
            self._require_open(),
            ctypes.byref(current),
            ctypes.byref(peak),
            ctypes.byref(budget),
        )
        return current.value, peak.value, budget.value

    def allocate(self, nbytes, stream=None):
        """The address (an int) of `nbytes` of device memory, counted against the budget."""
        pointer = ctypes.c_void_p()
        _capi.call(
            "zoe_device_allocate", self._require_open(), int(nbytes), _stream_handle(stream), ctypes.byref(pointer)
        )
        return pointer.value

    def free(self, pointer, nbytes, stream=None):
        """Frees memory from allocate() (`nbytes` as allocated) after the work on `stream`."""
        _capi.call("zoe_device_free", self._require_open(), pointer, int(nbytes), _stream_handle(stream))

    def copy(self, dst, src, nbytes, kind, stream=None):
        """Copies `nbytes` from address `src` to `dst` in order with `stream`'s work; kind is
        "host_to_device", "device_to_host" or "device_to_device"."""
        if kind not in _capi.COPY_KINDS:
            raise UsageError(f"copy kind {kind!r} is not one of {sorted(_capi.COPY_KINDS)}")
        _capi.call(
            "zoe_copy_async",
            self._require_open(),
            dst,
            src,
            int(nbytes),
            _capi.COPY_KINDS[kind],
            _stream_handle(stream),
        )

    def close(self):
        """Destroys the device (idempotent). zoe.UsageError, the device left open, while engines
        or streams use it."""
        if self._owner is None:
            super().close()

    def __repr__(self):
        state = "closed" if self._handle is None else ("borrowed" if self._owner is not None else "open")
        return f"<zoe.Device {state}>"


class Stream(_handles.Handle):
    """A stream of `device` (zoe_stream_create); work zoe queues for a call on it runs in order
    with the caller's work on it. close() waits for its work, then destroys it (idempotent)."""

    _destroy = "zoe_stream_destroy"

    def __init__(self, device):
        if not isinstance(device, Device):
            raise UsageError(f"Stream needs a zoe.Device, not {type(device).__name__}")
        handle = ctypes.c_void_p()
        _capi.call("zoe_stream_create", device._require_open(), ctypes.byref(handle))
        self._handle = handle.value
        self.device = device
        _handles.register(self, _handles.STREAM)

    @property
    def native(self):
        """The cudaStream_t as an int on a CUDA device; None on the host device."""
        native = ctypes.c_void_p()
        _capi.call("zoe_stream_native", self._require_open(), ctypes.byref(native))
        return native.value

    def synchronize(self):
        """Blocks until the work queued on the stream is done; raises that work's failure."""
        _capi.call("zoe_stream_synchronize", self._require_open())

    def __repr__(self):
        return f"<zoe.Stream {'closed' if self._handle is None else 'open'}>"
