"""zoe: the ZeRO Offload Engine from Python, over its C API (zoe.h) through ctypes.

The names mirror zoe.h: zoe.Device / zoe.Stream, zoe.Model, zoe.Engine, zoe.footprint_plan,
zoe.launcher_ranks; every failed call raises the zoe.Error subclass of its zoe_status with
zoe_last_error()'s text. zoe.torch (needs torch) trains torch modules with it. Which libzoe_c is
loaded: zoe/_library.py (ZOE_LIBRARY, else the package's copy, else an installed one).
"""

from . import _capi
from .device import Device, Stream
from .engine import BatchSizes, Engine, GroupSettings, StageTimes, StepResult, Traffic
from .errors import (
    CommError,
    ConfigError,
    CorruptError,
    DeviceError,
    Error,
    InternalError,
    IOError,
    MemoryError,
    TimeoutError,
    UsageError,
)
from .model import Model, ParameterInfo, initializer_fill
from .plan import footprint_plan
from .ranks import Ranks, launcher_ranks

__all__ = [
    "BatchSizes",
    "CommError",
    "ConfigError",
    "CorruptError",
    "Device",
    "DeviceError",
    "Engine",
    "Error",
    "GroupSettings",
    "InternalError",
    "IOError",
    "MemoryError",
    "Model",
    "ParameterInfo",
    "Ranks",
    "StageTimes",
    "StepResult",
    "Stream",
    "TimeoutError",
    "Traffic",
    "UsageError",
    "footprint_plan",
    "initializer_fill",
    "launcher_ranks",
    "library_path",
    "version",
]


def version():
    """The loaded libzoe_c's version, "major.minor.patch" (zoe_version)."""
    return _capi.lib().zoe_version().decode("ascii")


def library_path():
    """The path (or name) of the libzoe_c this process loaded."""
    return _capi.lib().path


def _package_version():
    from importlib import metadata

    try:
        return metadata.version("zoe")
    except metadata.PackageNotFoundError:
        # Imported from a source tree (PYTHONPATH=bindings/python/src): not installed.
        return "0+source"


__version__ = _package_version()
