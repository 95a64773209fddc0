"""What zoe.torch reads of a DeepSpeed configuration; zoe's engine reads the whole of it itself.

The configuration is taken as DeepSpeed takes it (a dict or the path of a JSON file; JSON text is
accepted too, as zoe.Engine accepts it) and handed to zoe.Engine as given, with zoe.torch's own
overrides (a client optimizer's hyperparameters) merged over it as zoe_engine_desc's
config_overrides. The batch sizes are zoe's engine's (DeepSpeed's arithmetic over its world size). The values below are read here because the Python side acts on them: the
16-bit type the model runs in, the optimizer's defaults for the param
groups, DeepSpeed's scheduler block and whether zoe.activations gives autograd's saved tensors room.
"""

import json
import os

import torch

from .._config import merge_patch
from ..errors import ConfigError, UsageError

# engine/CONFIG.md's defaults of the keys read here.
_DEFAULT_LR = 0.001
_DEFAULT_BETAS = (0.9, 0.999)
_DEFAULT_EPS = 1e-8
_DEFAULT_WEIGHT_DECAY = 0.0


def load(config):
    """The configuration as a dict: `config` a dict (copied), a path (str or PathLike) or JSON text."""
    if isinstance(config, dict):
        return json.loads(json.dumps(config))
    if isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if isinstance(config, str) and text.lstrip().startswith("{"):
            source, document = "config", text
        else:
            source = text
            try:
                with open(text, encoding="utf-8") as f:
                    document = f.read()
            except OSError as e:
                raise ConfigError(f"config {text!r} cannot be read: {e.strerror}") from None
        try:
            value = json.loads(document)
        except ValueError as e:
            raise ConfigError(f"{source}: not JSON ({e})") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: the configuration is a JSON object, not {type(value).__name__}")
        return value
    raise UsageError(f"config must be a dict or the path of a JSON file, not {type(config).__name__}")


def _number(block, key, default, where):
    value = block.get(key, default)
    if value == "auto":  # Hugging Face's placeholder: zoe's default, as zoe's engine reads it
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key} must be a number, not {value!r}")
    return value


def _enabled(document, key):
    block = document.get(key)
    return isinstance(block, dict) and block.get("enabled") is True


class Settings:
    """The keys zoe.torch acts on, from the configuration with `overrides` merged over it."""

    def __init__(self, document, overrides=None):
        if overrides:
            document = merge_patch(document, overrides)
        self.document = document
        fp16 = _enabled(document, "fp16")
        bf16 = _enabled(document, "bf16") or _enabled(document, "bfloat16")
        if fp16 and bf16:
            raise ConfigError("fp16.enabled and bf16.enabled are both true: pick one")
        # The type the model runs in and zoe's working copy; the masters are fp32 in zoe either way.
        self.dtype = torch.float16 if fp16 else torch.bfloat16 if bf16 else torch.float32
        optimizer = document.get("optimizer") or {}
        params = optimizer.get("params") or {}
        where = "optimizer.params"
        self.optimizer_defaults = {
            "lr": float(_number(params, "lr", _DEFAULT_LR, where)),
            "weight_decay": float(_number(params, "weight_decay", _DEFAULT_WEIGHT_DECAY, where)),
            "betas": tuple(params.get("betas", _DEFAULT_BETAS)),
            "eps": float(_number(params, "eps", _DEFAULT_EPS, where)),
        }
        self.scheduler = document.get("scheduler")
        activations = (document.get("zoe") or {}).get("activations") or {}
        # Without room in zoe's store every save would fail: autograd keeps the tensors then.
        self.activations = any(activations.get(k, 0) for k in ("host_bytes", "nvme_bytes"))
