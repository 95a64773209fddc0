"""zoe.Engine: training a Model's parameters through the C API's engine (zoe_engine_*)."""

import ctypes
import json
from collections import namedtuple

import numpy as np

from . import _capi, _handles, ranks
from ._config import Config
from .device import Device, _stream_handle
from .errors import UsageError
from .model import Model

__all__ = ["BatchSizes", "Engine", "GroupSettings", "StepResult", "StageTimes", "Traffic"]

StepResult = namedtuple("StepResult", "skipped loss_scale grad_norm clip_coefficient optimizer_steps")
StepResult.__doc__ = "A zoe_step_result (skipped: a bool; loss_scale: the next step's)."
StageTimes = namedtuple("StageTimes", "param_io_s adam_s optimizer_io_s io_s io_read_bytes io_write_bytes")
StageTimes.__doc__ = (
    "A zoe_stage_times: each stage alone, in seconds, and io_s, the last step's NVMe bytes "
    "(io_read_bytes, io_write_bytes) replayed through the raw I/O engine: "
    "the faster of reads and writes at once and the reads alone then the writes alone."
)
Traffic = namedtuple("Traffic", "intra_node_bytes inter_node_bytes collectives")
Traffic.__doc__ = "A zoe_comm_traffic: bytes this rank sent in the engine's collectives so far."
GroupSettings = namedtuple("GroupSettings", "lr weight_decay betas eps")
GroupSettings.__doc__ = "A zoe_group_hyper: one parameter group's lr, weight_decay, (beta1, beta2) and eps."
BatchSizes = namedtuple("BatchSizes", "train_batch_size train_micro_batch_size_per_gpu gradient_accumulation_steps")
BatchSizes.__doc__ = (
    "A zoe_batch_sizes: DeepSpeed's three batch keys resolved for the engine's world size "
    "(train_batch_size and train_micro_batch_size_per_gpu 0 when the configuration wrote neither)."
)


def _host_comm_address(host_comm):
    """The address of a zoe_host_comm: a ctypes structure (zoe._host_comm's), or an object whose
    ctypes `_as_parameter_` is one (or a pointer to one)."""
    if host_comm is None:
        return None
    target = getattr(host_comm, "_as_parameter_", host_comm)
    if isinstance(target, ctypes.Structure):
        return ctypes.addressof(target)
    if isinstance(target, ctypes._Pointer):
        return ctypes.cast(target, ctypes.c_void_p).value
    raise UsageError(
        f"Engine host_comm must be a zoe_host_comm ctypes structure (zoe._host_comm), not {type(host_comm).__name__}"
    )


def _group_hypers(call, groups):
    """groups, (lr, weight_decay) pairs or (lr, weight_decay, (beta1, beta2), eps) tuples, as a
    zoe_group_hyper array and its length."""
    hypers = []
    for g, group in enumerate(groups):
        try:
            if len(group) == 2:
                lr, weight_decay = group
                hypers.append(_capi.GroupHyper(lr=float(lr), weight_decay=float(weight_decay)))
            else:
                lr, weight_decay, (beta1, beta2), eps = group
                if not float(eps) > 0:  # 0 would mean "the configuration's betas and eps" to the C API
                    raise ValueError
                hypers.append(
                    _capi.GroupHyper(lr=float(lr), weight_decay=float(weight_decay), beta1=float(beta1),
                                     beta2=float(beta2), eps=float(eps))
                )
        except (TypeError, ValueError):
            raise UsageError(
                f"{call}: groups[{g}] is {group!r}, not an (lr, weight_decay) pair or an "
                "(lr, weight_decay, (beta1, beta2), eps) tuple with eps > 0"
            ) from None
    return (_capi.GroupHyper * max(len(hypers), 1))(*hypers), len(hypers)


def _step_result(result):
    return StepResult(
        bool(result.skipped), result.loss_scale, result.grad_norm, result.clip_coefficient, result.optimizer_steps
    )


class Engine(_handles.Handle):
    """An engine (zoe_engine_create) over `model` with `config`: a dict, a path (str or PathLike)
    or JSON text (a str starting with '{'), with `config_overrides` (a dict or JSON text) merged
    over it as an RFC 7386 patch. device None: the engine opens the device the configuration's
    zoe.device names (Engine.device, closed with the engine). Several ranks: collective, as are
    close() and the collectives named in zoe.h. close() or a `with` block destroys it (removing
    its swap files); one never closed is closed at interpreter exit."""

    _destroy = "zoe_engine_destroy"

    def __init__(self, model, config, device=None, config_overrides=None, host_comm=None):
        if not isinstance(model, Model):
            raise UsageError(f"Engine needs a zoe.Model, not {type(model).__name__}")
        if device is not None and not isinstance(device, Device):
            raise UsageError(f"Engine device must be a zoe.Device or None, not {type(device).__name__}")
        config = Config(config, config_overrides)
        desc = _capi.EngineDesc(
            model=model._require_open(),
            device=None if device is None else device._require_open(),
            host_comm=_host_comm_address(host_comm),
        )
        keep = config.fill(desc)
        handle = ctypes.c_void_p()
        _capi.call("zoe_engine_create", ctypes.byref(desc), ctypes.byref(handle))
        del keep
        self._handle = handle.value
        # zoe keeps host_comm's `user` (and the callbacks behind it) until zoe_engine_destroy.
        self._host_comm = host_comm
        # What the model says of its parameters, kept: the model may be closed after this.
        self.parameters = list(model.parameters)
        self.modules = list(model.modules)
        self._module_parameters = [model.module_parameters(m) for m in range(len(model.modules))]
        self._default_lr = config.learning_rate()
        if device is None:
            own = ctypes.c_void_p()
            try:
                _capi.call("zoe_engine_device", self._handle, ctypes.byref(own))
            except BaseException:
                # A failed constructor leaves nothing open behind it.
                _capi.lib().zoe_engine_destroy(self._handle)
                raise
            device = Device._borrowed(own.value, self)
        self.device = device
        _handles.register(self, _handles.ENGINE)

    def _parameter(self, p):
        if not 0 <= p < len(self.parameters):
            raise UsageError(f"parameter {p} is not a parameter of this engine's model ({len(self.parameters)} parameters)")
        return self.parameters[p]

    def _module(self, m):
        if not 0 <= m < len(self.modules):
            raise UsageError(f"module {m} is not a module of this engine's model ({len(self.modules)} modules)")
        return m

    def ranks(self):
        """The engine's zoe.Ranks (its communicator's)."""
        out = _capi.Ranks()
        _capi.call("zoe_engine_ranks", self._require_open(), ctypes.byref(out))
        return ranks.from_struct(out)

    def batch_sizes(self):
        """The engine's zoe.engine.BatchSizes: the configuration's batch keys, the one not written
        derived for the engine's world size as DeepSpeed derives it."""
        out = _capi.BatchSizes()
        _capi.call("zoe_engine_batch_sizes", self._require_open(), ctypes.byref(out))
        return BatchSizes(out.train_batch_size, out.train_micro_batch_size_per_gpu, out.gradient_accumulation_steps)

    def module_parameters(self, module):
        """The ids of module `module`'s parameters, in the order they were added."""
        return list(self._module_parameters[self._module(module)])

    # ---- a micro-batch ----------------------------------------------------------------------------

    def begin_micro_batch(self):
        _capi.call("zoe_begin_micro_batch", self._require_open())

    def end_micro_batch(self):
        _capi.call("zoe_end_micro_batch", self._require_open())

    def fetch(self, module, pass_="forward", stream=None):
        """Brings module `module`'s parameters to the device for pass_ ("forward" or "backward").
        A forward fetch outside a micro-batch is an inference fetch (zoe_fetch): no gradients, no
        micro-batch counted; begin_micro_batch, step and the other between-step calls raise
        zoe.UsageError naming its module until it is released."""
        if pass_ not in _capi.PASSES:
            raise UsageError(f"fetch of module {module}: pass_ {pass_!r} is not 'forward' or 'backward'")
        _capi.call("zoe_fetch", self._require_open(), int(module), _capi.PASSES[pass_], _stream_handle(stream))

    def release(self, module, stream=None):
        _capi.call("zoe_release", self._require_open(), int(module), _stream_handle(stream))

    def parameter_address(self, parameter):
        """The device address (an int) of the parameter's full value in its working dtype, valid
        from its module's fetch until its release."""
        address = ctypes.c_void_p()
        _capi.call("zoe_parameter_address", self._require_open(), int(parameter), ctypes.byref(address))
        return address.value

    def module_gradients(self, module, stream=None):
        """The addresses of zoe's zero-filled gradient buffers of the module's parameters, in
        their order (0 for a parameter that has none: a frozen one)."""
        count = len(self._module_parameters[self._module(module)])
        buffers = (ctypes.c_void_p * max(count, 1))()
        _capi.call(
            "zoe_module_gradients", self._require_open(), int(module), _stream_handle(stream), buffers, count
        )
        return [b or 0 for b in buffers[:count]]

    def reduce_gradients(self, module, stream=None):
        _capi.call("zoe_reduce_gradients", self._require_open(), int(module), _stream_handle(stream))

    # ---- activations ------------------------------------------------------------------------------

    def activation_save(self, pointer, nbytes, stream=None):
        """Keeps a copy of `nbytes` at device address `pointer` until backward; returns its id."""
        activation = ctypes.c_uint64()
        _capi.call(
            "zoe_activation_save",
            self._require_open(),
            pointer,
            int(nbytes),
            _stream_handle(stream),
            ctypes.byref(activation),
        )
        return activation.value

    def activation_load(self, activation, stream=None):
        """Brings the activation back; returns the device address of its copy."""
        pointer = ctypes.c_void_p()
        _capi.call(
            "zoe_activation_load", self._require_open(), int(activation), _stream_handle(stream), ctypes.byref(pointer)
        )
        return pointer.value

    def activation_free(self, activation, stream=None):
        _capi.call("zoe_activation_free", self._require_open(), int(activation), _stream_handle(stream))

    # ---- the step ---------------------------------------------------------------------------------

    def loss_scale(self):
        """What the loss is multiplied by before backward (fp16's dynamic scale; 1 otherwise)."""
        scale = ctypes.c_double()
        _capi.call("zoe_loss_scale", self._require_open(), ctypes.byref(scale))
        return scale.value

    def step(self, lr=None, groups=None):
        """One optimizer step over the step's gradients; returns a StepResult. lr None: the
        configuration's optimizer.params.lr. groups: per parameter group (zoe_step_groups; the
        model's group count of them), instead of lr, an (lr, weight_decay) pair (the
        configuration's betas and eps) or an (lr, weight_decay, (beta1, beta2), eps) tuple."""
        if groups is not None:
            if lr is not None:
                raise UsageError("step: give lr or groups, not both (each group carries its lr)")
            return self._step_groups(groups)
        if lr is None:
            lr = self._default_lr
            if lr is None:
                raise UsageError("step: lr is not given and the configuration's optimizer.params.lr cannot be read here")
        result = _capi.StepResult()
        _capi.call("zoe_step", self._require_open(), float(lr), ctypes.byref(result))
        return _step_result(result)

    def _step_groups(self, groups):
        array, count = _group_hypers("step", groups)
        result = _capi.StepResult()
        _capi.call("zoe_step_groups", self._require_open(), array, count, ctypes.byref(result))
        return _step_result(result)

    def announce_step(self, groups):
        """Announces the settings per parameter group (as step's groups) the next step(groups=...) will
        be given (zoe_announce_step_groups), so that the optimizer step inside backward steps each
        shard with them instead of the last step's: call it each step before or during the last
        micro-batch's backward when a schedule changes lr. A step given other settings drops what
        was stepped ahead and steps after backward: exact either way."""
        array, count = _group_hypers("announce_step", groups)
        _capi.call("zoe_announce_step_groups", self._require_open(), array, count)

    # ---- states -----------------------------------------------------------------------------------

    def parameter_numel(self, parameter):
        numel = ctypes.c_uint64()
        _capi.call("zoe_parameter_numel", self._require_open(), int(parameter), ctypes.byref(numel))
        return numel.value

    def read_state(self, parameter, state="parameter"):
        """State `state` ("parameter": the fp32 master, "gradient", "exp_avg", "exp_avg_sq") of the
        parameter as a float32 array of its shape. Between micro-batches only."""
        info = self._parameter(parameter)
        if state not in _capi.STATES:
            raise UsageError(f"read_state of {info.name!r}: state {state!r} is not one of {sorted(_capi.STATES)}")
        values = np.empty(info.shape, dtype=np.float32)
        _capi.call(
            "zoe_read_state", self._require_open(), int(parameter), _capi.STATES[state], _capi.float_pointer(values), values.size
        )
        return values

    def write_state(self, parameter, values, state="parameter"):
        """Sets state `state` ("parameter", "exp_avg" or "exp_avg_sq") of the parameter to `values`
        (anything numpy makes its numel float32 values of, row-major), between steps. Every rank
        passes the whole value."""
        info = self._parameter(parameter)
        if state not in _capi.STATES:
            raise UsageError(f"write_state of {info.name!r}: state {state!r} is not one of {sorted(_capi.STATES)}")
        array = np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))
        _capi.call(
            "zoe_write_state", self._require_open(), int(parameter), _capi.STATES[state], _capi.float_pointer(array), array.size
        )

    # ---- checkpoints ------------------------------------------------------------------------------

    def checkpoint_save(self, directory, tag=None, client=None):
        """Saves every state but the gradients under directory/tag (None: "step-<n>"), with `client`
        (bytes, or None) stored beside them (zoe_checkpoint_save_client; checkpoint_client() gives
        it back after a load)."""
        where = self._checkpoint_arguments(directory, tag)
        if client is None:
            _capi.call("zoe_checkpoint_save", *where)
        else:
            blob = bytes(client)
            _capi.call("zoe_checkpoint_save_client", *where, blob, len(blob))

    def checkpoint_load(self, directory, tag=None):
        """Loads directory/tag (None: the latest)."""
        _capi.call("zoe_checkpoint_load", *self._checkpoint_arguments(directory, tag))

    def _checkpoint_arguments(self, directory, tag):
        return (
            self._require_open(),
            _capi.encode(str(directory), "checkpoint directory"),
            _capi.encode(tag, "checkpoint tag"),
        )

    def checkpoint_client(self):
        """The client bytes of the checkpoint last loaded into this engine; None when none was
        loaded or it holds none."""
        handle = self._require_open()
        length = ctypes.c_size_t()
        _capi.call("zoe_checkpoint_client", handle, None, 0, ctypes.byref(length))
        if length.value == 0:
            return None
        buffer = ctypes.create_string_buffer(length.value)
        _capi.call("zoe_checkpoint_client", handle, buffer, length.value, ctypes.byref(length))
        return buffer.raw[: length.value]

    def checkpoint_groups(self):
        """Each parameter group's zoe.engine.GroupSettings (lr, weight_decay, betas, eps), in group
        order, as the checkpoint last loaded into this engine stored them (zoe_checkpoint_groups),
        for a framework's param_groups to take back; zoe.UsageError when none was loaded."""
        count = 1 + max((p.group for p in self.parameters), default=0)
        groups = (_capi.GroupHyper * count)(*(_capi.GroupHyper() for _ in range(count)))
        _capi.call("zoe_checkpoint_groups", self._require_open(), groups, count)
        return [GroupSettings(g.lr, g.weight_decay, (g.beta1, g.beta2), g.eps) for g in groups]

    # ---- statistics -------------------------------------------------------------------------------

    def statistics(self):
        """The engine's statistics (zoe_statistics) as a dict."""
        handle = self._require_open()
        length = ctypes.c_size_t()
        _capi.call("zoe_statistics", handle, None, 0, ctypes.byref(length))
        # The figures may grow between the two calls: ask again until the buffer holds them.
        while True:
            buffer = ctypes.create_string_buffer(length.value + 1)
            needed = ctypes.c_size_t()
            _capi.call("zoe_statistics", handle, buffer, len(buffer), ctypes.byref(needed))
            if needed.value < len(buffer):
                return json.loads(buffer.value.decode("utf-8"))
            length = needed

    def measure_stages(self):
        """Each stage of a step's offload timed alone (zoe_measure_stages), a StageTimes."""
        times = _capi.StageTimes()
        _capi.call("zoe_measure_stages", self._require_open(), ctypes.byref(times))
        return StageTimes(
            times.param_io_s, times.adam_s, times.optimizer_io_s, times.io_s, times.io_read_bytes, times.io_write_bytes
        )

    def traffic(self):
        out = _capi.CommTraffic()
        _capi.call("zoe_engine_traffic", self._require_open(), ctypes.byref(out))
        return Traffic(out.intra_node_bytes, out.inter_node_bytes, out.collectives)

    def all_reduce_sum(self, values):
        """The sums of `values` (float64) over the engine's ranks, a new array (collective)."""
        array = np.array(values, dtype=np.float64).reshape(-1)
        _capi.call(
            "zoe_all_reduce_sum",
            self._require_open(),
            array.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
            array.size,
        )
        return array

    # ---- lifetime ---------------------------------------------------------------------------------

    def close(self):
        """Destroys the engine (idempotent): waits for its work, frees its memory and removes its
        swap files. zoe.UsageError, the engine left open, while streams of its own device live."""
        super().close()
        self._host_comm = None

    def __repr__(self):
        return f"<zoe.Engine {'closed' if self._handle is None else 'open'}, {len(self.parameters)} parameters>"
