"""zoe.Model: the modules and parameters an engine is made from; zoe.initializer_fill."""

import ctypes
import operator
from collections import namedtuple

import numpy as np

from . import _capi, _handles
from .errors import UsageError

__all__ = ["Model", "ParameterInfo", "initializer_fill"]

ParameterInfo = namedtuple("ParameterInfo", "name module shape dtype frozen group")
ParameterInfo.__doc__ = "What a Model knows of one of its parameters (shape: a tuple of ints)."


def _shape_of(shape, name):
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise UsageError(f"parameter {name!r}: shape {shape!r} is not a sequence of ints") from None
    for d in dims:
        if d <= 0:
            raise UsageError(f"parameter {name!r}: shape {dims} has an extent that is not positive")
    return dims


class Model(_handles.Handle):
    """An empty model (zoe_model_create) to add modules and parameters to; one thread per model.
    An Engine reads it when made; the model may be closed afterwards."""

    _destroy = "zoe_model_destroy"

    def __init__(self):
        handle = ctypes.c_void_p()
        _capi.call("zoe_model_create", ctypes.byref(handle))
        self._handle = handle.value
        self.modules = []  # names, by module id
        self.parameters = []  # ParameterInfo, by parameter id
        self._module_parameters = []  # parameter ids, by module id
        # zoe_engine_create reads ZOE_INIT_DATA values from the caller's memory: kept here.
        self._data = []
        _handles.register(self, _handles.MODEL)

    def add_module(self, name):
        """Adds a module (the unit of fetch and release); returns its id (0, 1, ... in order)."""
        module = ctypes.c_uint32()
        _capi.call("zoe_model_add_module", self._require_open(), _capi.encode(name, "module name"), ctypes.byref(module))
        self.modules.append(str(name))
        self._module_parameters.append([])
        return module.value

    def add_parameter(
        self, module, name, shape, dtype="fp32", init=None, data=None, scale=0.0, seed=0, frozen=False, group=0
    ):
        """Adds a parameter to `module`; returns its id (0, 1, ... over the whole model).

        dtype: the working copy's type, "fp32", "fp16" or "bf16". init: "zeros", "uniform" (in
        [-scale, scale)), "normal" (standard deviation scale), both seeded by `seed`, or "data"
        (the values of `data`: anything numpy turns into numel floats, row-major); None means
        "data" when data is given, else "zeros". frozen: no gradient and no optimizer state.
        group: the parameter group whose lr and weight decay Engine.step(groups=...) applies."""
        if init is None:
            init = "zeros" if data is None else "data"
        if dtype not in _capi.DTYPES:
            raise UsageError(f"parameter {name!r}: dtype {dtype!r} is not one of {sorted(_capi.DTYPES)}")
        if init not in _capi.INITS:
            raise UsageError(f"parameter {name!r}: init {init!r} is not one of {sorted(_capi.INITS)}")
        dims = _shape_of(shape, name)
        values = None
        if init == "data":
            if data is None:
                raise UsageError(f"parameter {name!r}: init 'data' needs data")
            values = np.ascontiguousarray(np.asarray(data, dtype=np.float32).reshape(-1))
            numel = int(np.prod(dims, dtype=np.uint64))
            if values.size != numel:
                raise UsageError(
                    f"parameter {name!r}: data holds {values.size} values; shape {dims} has {numel} elements"
                )
        elif data is not None:
            raise UsageError(f"parameter {name!r}: data is given but init is {init!r} (not 'data')")
        group = operator.index(group)
        if group < 0 or group > 0xFFFFFFFF:
            raise UsageError(f"parameter {name!r}: group {group} is not in [0, 2^32)")
        frozen = bool(frozen)
        shape_array = (ctypes.c_uint64 * max(len(dims), 1))(*dims)
        desc = _capi.ParameterDesc(
            name=_capi.encode(name, "parameter name"),
            ndim=len(dims),
            shape=shape_array,
            dtype=_capi.DTYPES[dtype],
            init=_capi.INITS[init],
            data=None if values is None else _capi.float_pointer(values),
            scale=float(scale),
            seed=int(seed),
            frozen=int(frozen),
            group=group,
        )
        parameter = ctypes.c_uint32()
        _capi.call(
            "zoe_model_add_parameter", self._require_open(), int(module), ctypes.byref(desc), ctypes.byref(parameter)
        )
        if values is not None:
            self._data.append(values)
        self.parameters.append(ParameterInfo(str(name), int(module), dims, dtype, frozen, group))
        self._module_parameters[int(module)].append(parameter.value)
        return parameter.value

    def module_parameters(self, module):
        """The ids of module `module`'s parameters, in the order added."""
        return list(self._module_parameters[module])

    def close(self):
        """Destroys the model (idempotent); engines made from it are not affected."""
        super().close()
        self._data = []

    def __repr__(self):
        return f"<zoe.Model {len(self.modules)} modules, {len(self.parameters)} parameters>"


def initializer_fill(init, scale, seed, first, count):
    """Elements [first, first + count) of what seeded initializer `init` ("zeros", "uniform",
    "normal") gives a parameter with this scale and seed, as a float32 array (zoe_initializer_fill:
    a reference implementation reproduces zoe's initial values with it)."""
    if init not in _capi.INITS:
        raise UsageError(f"initializer_fill: init {init!r} is not one of {sorted(_capi.INITS)}")
    values = np.empty(int(count), dtype=np.float32)
    _capi.call(
        "zoe_initializer_fill",
        _capi.INITS[init],
        float(scale),
        int(seed),
        int(first),
        _capi.float_pointer(values),
        values.size,
    )
    return values
