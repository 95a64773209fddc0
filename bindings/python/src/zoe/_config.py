"""How a Python configuration (dict, path or JSON text) and its overrides become the
zoe_engine_desc fields that zoe_engine_create and zoe_footprint_plan read."""

import json
import os

from . import _capi
from .errors import UsageError

# optimizer.params.lr's default in engine/CONFIG.md.
_DEFAULT_LR = 0.001


def _json_text(value, what):
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, (str, bytes)):
        return value
    raise UsageError(f"{what} must be a dict or JSON text, not {type(value).__name__}")


class Config:
    """A configuration as the C API takes it: exactly one of json / path, and the overrides."""

    def __init__(self, config, overrides=None):
        self.json = None
        self.path = None
        if isinstance(config, dict):
            self.json = json.dumps(config)
        elif isinstance(config, os.PathLike):
            self.path = os.fspath(config)
        elif isinstance(config, (str, bytes)):
            text = config.decode("utf-8") if isinstance(config, bytes) else config
            # A JSON document is an object; anything else is the path of a file holding one.
            if text.lstrip().startswith("{"):
                self.json = text
            else:
                self.path = text
        else:
            raise UsageError(f"config must be a dict, a path or JSON text, not {type(config).__name__}")
        self.overrides = None if overrides is None else _json_text(overrides, "config_overrides")

    def fill(self, desc):
        """Sets desc's config fields; returns what must stay alive while the C call reads them."""
        keep = (
            _capi.encode(self.json, "config"),
            _capi.encode(self.path, "config path"),
            _capi.encode(self.overrides, "config_overrides"),
        )
        desc.config_json, desc.config_path, desc.config_overrides = keep
        return keep

    def learning_rate(self):
        """optimizer.params.lr after the overrides are merged over it (its default when absent), or
        None when the configuration cannot be read here (zoe itself reports why at create)."""
        try:
            if self.json is not None:
                document = json.loads(self.json)
            else:
                with open(self.path, encoding="utf-8") as f:
                    document = json.load(f)
            if self.overrides is not None:
                document = merge_patch(document, json.loads(self.overrides))
            lr = document.get("optimizer", {}).get("params", {}).get("lr", _DEFAULT_LR)
            return float(lr)
        except (OSError, ValueError, TypeError, AttributeError):
            return None


def merge_patch(target, patch):
    """RFC 7386, as zoe_engine_desc.config_overrides is merged over the configuration."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
