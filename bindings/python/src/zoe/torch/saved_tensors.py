"""What autograd saves for backward, kept so that backward never reads memory zoe has reused.

A tensor autograd saves may be a fetched parameter or a view of one (F.linear saves W, x @ W.t()
saves W.t()); by backward the module has been released and that memory belongs to zoe again. Such
a tensor is saved as (parameter, size, stride, storage offset) and rebuilt at unpack from the
parameter's data as it is then: the module fetched for backward, by the hooks or, when no hook
fetched it first, by the unpack itself.

With the configuration's zoe.activations giving room, every other saved tensor of at least
`activation_min_bytes` goes to zoe's activation store (zoe_activation_save) and comes back at
unpack (zoe_activation_load, copied out, zoe_activation_free), so it leaves the device between
forward and backward.
"""

import torch

from .tensors import over_address


class _ParameterView:
    __slots__ = ("slot", "size", "stride", "offset")

    def __init__(self, slot, tensor):
        self.slot = slot
        self.size = tensor.size()
        self.stride = tensor.stride()
        self.offset = tensor.storage_offset()


class _Stored:
    __slots__ = ("id", "shape", "dtype")

    def __init__(self, activation, tensor):
        self.id = activation
        self.shape = tensor.shape
        self.dtype = tensor.dtype


class SavedTensors:
    """The pack and unpack hooks of one engine (context() installs them around a forward)."""

    def __init__(self, runtime, zoe_engine, stream, device, activations, activation_min_bytes):
        self._runtime = runtime
        self._zoe = zoe_engine
        self._stream = stream
        self._device = device
        self._activations = activations
        self._min_bytes = activation_min_bytes
        self.stored = 0  # activations that went to zoe's store, for tests and statistics
        self._hooks = (runtime.timed(self._pack), runtime.timed(self._unpack))  # their time counts as the hooks'

    def context(self):
        return torch.autograd.graph.saved_tensors_hooks(*self._hooks)

    def _pack(self, tensor):
        slot = self._runtime.bound_slot(tensor)
        if slot is not None:
            if tensor.dtype != slot.param.dtype:
                return tensor.clone()  # a reinterpretation of the parameter's bytes: keep a copy
            return _ParameterView(slot, tensor)
        if (
            self._activations
            and tensor.device == self._device
            and tensor.numel() * tensor.element_size() >= max(self._min_bytes, 1)
        ):
            return self._store(tensor)
        return tensor

    def _unpack(self, packed):
        if isinstance(packed, _ParameterView):
            self._runtime.ensure_bound(packed.slot.unit)
            return packed.slot.param.data.as_strided(packed.size, packed.stride, packed.offset)
        if isinstance(packed, _Stored):
            return self._load(packed)
        return packed

    def _store(self, tensor):
        source = tensor.detach().contiguous()
        self._runtime.open_micro_batch()
        activation = self._zoe.activation_save(
            source.data_ptr(), source.numel() * source.element_size(), self._stream
        )
        # zoe copies on its stream: on the host device, wait before `source` can be freed.
        if self._device.type == "cpu":
            self._stream.synchronize()
        self.stored += 1
        return _Stored(activation, source)

    def _load(self, stored):
        address = self._zoe.activation_load(stored.id, self._stream)
        if self._device.type == "cpu":
            self._stream.synchronize()
        tensor = over_address(address, stored.shape, stored.dtype, self._device).clone()
        self._zoe.activation_free(stored.id, self._stream)
        return tensor
