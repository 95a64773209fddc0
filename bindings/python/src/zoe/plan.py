"""zoe.footprint_plan(): what an engine would need per rank, before any engine exists."""

import ctypes

from . import _capi
from ._config import Config
from .errors import UsageError
from .model import Model

__all__ = ["footprint_plan"]


def footprint_plan(model, config, world_size=1, config_overrides=None):
    """The footprint plan (zoe_footprint_plan) of the engine Engine(model, config,
    config_overrides=...) would make, on each of `world_size` ranks, as a dict of bytes:
    device_bytes, pinned_bytes, host_bytes, disk_bytes, activation_host_bytes,
    activation_nvme_bytes, activation_prefetch_bytes. Allocates and opens nothing."""
    if not isinstance(model, Model):
        raise UsageError(f"footprint_plan needs a zoe.Model, not {type(model).__name__}")
    desc = _capi.EngineDesc(model=model._require_open())
    keep = Config(config, config_overrides).fill(desc)
    footprint = _capi.Footprint()
    _capi.call("zoe_footprint_plan", ctypes.byref(desc), int(world_size), ctypes.byref(footprint))
    del keep
    return {name: getattr(footprint, name) for name, _ in _capi.Footprint._fields_ if name != "struct_size"}
