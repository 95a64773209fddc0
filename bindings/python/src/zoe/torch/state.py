"""The engine's states seen from torch: a consolidated state_dict, and checkpoints as DeepSpeed's.

zoe keeps every parameter state (masters, moments) and saves them in its checkpoint itself; what
only the Python side knows (the client state, the param groups' lr and weight decay as schedulers
left them, the scheduler's own state, the step counters) travels in the checkpoint's client blob
(zoe_checkpoint_save_client), so one crash-safe checkpoint holds all of it.
"""

import io
import os

import torch

from ..errors import CorruptError, UsageError


def state_dict(module, layout, zoe_engine):
    """module.state_dict()'s keys: parameters as fp32 CPU tensors read from zoe's masters (a tied
    parameter under each of its names), buffers as torch holds them (copied)."""
    read = {}
    out = {}
    for key, value in module.state_dict(keep_vars=True).items():
        slot = layout.slot_of.get(value) if isinstance(value, torch.nn.Parameter) else None
        if slot is None:
            out[key] = value.detach().clone()
            continue
        if slot not in read:
            read[slot] = torch.from_numpy(zoe_engine.read_state(slot.id))
        out[key] = read[slot]
    return out


def load_state_dict(module, layout, zoe_engine, values, strict=True):
    """Writes `values` (keyed as module.state_dict()) into zoe's parameters (zoe_write_state: the
    master and the working copy) and torch's buffers. Every key, shape and value is checked before
    anything is written: zoe.UsageError naming the key otherwise, nothing changed."""
    own = module.state_dict(keep_vars=True)
    if strict:
        missing = [k for k in own if k not in values]
        unexpected = [k for k in values if k not in own]
        if missing or unexpected:
            raise UsageError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    writes = []
    for key, target in own.items():
        if key not in values:
            continue
        value = torch.as_tensor(values[key])
        slot = layout.slot_of.get(target) if isinstance(target, torch.nn.Parameter) else None
        shape = slot.shape if slot is not None else target.shape
        if value.shape != shape:
            raise UsageError(f"load_state_dict: {key!r} has shape {tuple(value.shape)}, the model's is {tuple(shape)}")
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise UsageError(f"load_state_dict: {key!r} holds an inf or NaN")
        writes.append((slot, target, value))
    written = set()
    for slot, target, value in writes:
        if slot is None:
            with torch.no_grad():
                target.copy_(value)
        elif slot not in written:  # a tied parameter's names all hold its one value
            zoe_engine.write_state(slot.id, value.detach().to("cpu", torch.float32).numpy())
            written.add(slot)


def client_blob(client_state, optimizer, lr_scheduler, counters):
    """The bytes of what a checkpoint keeps for the Python side."""
    state = {
        "client_state": client_state,
        "param_groups": [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups],
        "lr_scheduler": None if lr_scheduler is None else lr_scheduler.state_dict(),
        "counters": counters,
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def read_client_blob(blob, where):
    """The dict client_blob wrote; zoe.CorruptError naming `where` when it is not one."""
    if blob is None:
        raise CorruptError(
            f"checkpoint {where} has no zoe.torch client data: it was not saved by engine.save_checkpoint"
        )
    try:
        state = torch.load(io.BytesIO(blob), weights_only=False)
    except Exception as e:  # noqa: BLE001 (whatever unpickling raises, the blob is not ours)
        raise CorruptError(f"checkpoint {where}: its zoe.torch client data cannot be read ({e})") from None
    if not isinstance(state, dict) or "param_groups" not in state:
        raise CorruptError(f"checkpoint {where}: its client data is not zoe.torch's")
    return state


def restore_groups(optimizer, saved_groups, where):
    if len(saved_groups) != len(optimizer.param_groups):
        raise CorruptError(
            f"checkpoint {where} has {len(saved_groups)} param groups, this optimizer {len(optimizer.param_groups)}"
        )
    for group, saved in zip(optimizer.param_groups, saved_groups):
        group.update(saved)


def latest_tag(directory):
    """The tag `directory/latest` names (zoe.CorruptError naming it when it cannot be read)."""
    path = os.path.join(directory, "latest")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except OSError as e:
        raise CorruptError(f"no checkpoint to load in {str(directory)!r}: {path!r}: {e.strerror}") from None
