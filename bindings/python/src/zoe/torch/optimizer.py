"""The optimizer zoe.torch.initialize returns, and where its parameter groups come from.

zoe runs Adam itself, on whatever tier holds each state; the returned optimizer is a
torch.optim.Optimizer whose param_groups are what the step reads: each group's lr, weight_decay,
betas and eps at every step (zoe_step_groups, one zoe group per torch group), so `group["lr"] = x`
(or betas, as a scheduler cycling momentum sets them) between steps and torch's schedulers built on
it work as they do on torch.optim.AdamW.

The groups come, as in deepspeed.initialize, from the optimizer passed in (a torch.optim.Adam or
AdamW, or a callable making one from the parameters), else from model_parameters (parameters, or
dicts of torch's group form), else the configuration's optimizer block over every parameter.
"""

import torch

from ..errors import UsageError


class ZoeOptimizer(torch.optim.Optimizer):
    """torch's optimizer interface over zoe's step. Its state stays in zoe (state is empty here);
    step() is zoe's optimizer step over the gradients of the step's micro-batches, which
    engine.step() calls at the accumulation boundary."""

    def __init__(self, groups, defaults):
        super().__init__(groups, defaults)
        self._apply = None  # set by the engine: the step with these param_groups

    def step(self, closure=None):
        if closure is not None:
            raise UsageError("optimizer.step(closure): zoe's step takes no closure (run forward and backward first)")
        if self._apply is None:
            raise UsageError("optimizer.step(): this optimizer's engine is closed")
        return self._apply()


def _torch_groups(optimizer, names):
    """The groups of a client torch optimizer, and the configuration patch its settings make."""
    if not isinstance(optimizer, torch.optim.Adam):
        raise UsageError(
            f"optimizer {type(optimizer).__name__} is not supported: zoe runs Adam and AdamW "
            "(pass torch.optim.AdamW / Adam, or none and an optimizer block in the configuration)"
        )
    if optimizer.state:
        raise UsageError(
            "optimizer has state already (it has stepped): zoe.torch.initialize takes a fresh optimizer"
        )
    groups = []
    first = optimizer.param_groups[0]
    decoupled = first.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW))
    for i, g in enumerate(optimizer.param_groups):
        where = f"optimizer.param_groups[{i}]"
        for key in ("amsgrad", "maximize", "differentiable"):
            if g.get(key):
                raise UsageError(f"{where}[{key!r}] is true: zoe's Adam does not support {key}")
        if g.get("decoupled_weight_decay", decoupled) != decoupled:
            raise UsageError(f"{where}['decoupled_weight_decay'] differs from param_groups[0]'s")
        groups.append(
            {
                "params": _parameters(g["params"], names, where),
                "lr": float(g["lr"]),
                "weight_decay": float(g["weight_decay"]),
                "betas": _betas(g["betas"], where),
                "eps": float(g["eps"]),
            }
        )
    patch = {
        "optimizer": {
            "type": "AdamW" if decoupled else "Adam",
            "params": {
                "lr": float(first["lr"]),
                "betas": [float(b) for b in first["betas"]],
                "eps": float(first["eps"]),
                "weight_decay": float(first["weight_decay"]),
                "adam_w_mode": bool(decoupled),
            },
        }
    }
    return groups, patch


def _betas(value, where):
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise UsageError(f"{where}['betas'] is {value!r}, not a pair (beta1, beta2)")
    return tuple(float(b) for b in value)


def _parameters(params, names, where):
    params = [params] if isinstance(params, torch.Tensor) else list(params)
    for p in params:
        if not isinstance(p, torch.Tensor) or p not in names:
            raise UsageError(f"{where} holds {type(p).__name__} that is not a parameter of the model")
    return params


def param_groups(model, optimizer, model_parameters, settings):
    """(groups, configuration patch): torch-form groups (params, lr, weight_decay; betas and eps
    where they come from the client, the defaults' otherwise) and what the
    configuration must say for zoe's Adam to be the client optimizer's (None: nothing)."""
    names = {}
    for name, p in model.named_parameters():
        names.setdefault(p, name)
    defaults = settings.optimizer_defaults
    patch = None
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        if not callable(optimizer):
            raise UsageError(f"optimizer must be a torch.optim.Optimizer or a callable making one, not {optimizer!r}")
        optimizer = optimizer(model.parameters() if model_parameters is None else model_parameters)
    if optimizer is not None:
        groups, patch = _torch_groups(optimizer, names)
    elif model_parameters is not None:
        items = list(model_parameters)
        if items and all(isinstance(g, dict) for g in items):
            groups = []
            for i, g in enumerate(items):
                where = f"model_parameters[{i}]"
                if "params" not in g:
                    raise UsageError(f"{where} is a group without 'params'")
                groups.append(
                    {
                        "params": _parameters(g["params"], names, where),
                        "lr": float(g.get("lr", defaults["lr"])),
                        "weight_decay": float(g.get("weight_decay", defaults["weight_decay"])),
                        "betas": _betas(g.get("betas", defaults["betas"]), where),
                        "eps": float(g.get("eps", defaults["eps"])),
                    }
                )
        else:
            params = _parameters(items, names, "model_parameters")
            groups = [{"params": params, "lr": defaults["lr"], "weight_decay": defaults["weight_decay"]}]
    else:
        groups = [{"params": list(names), "lr": defaults["lr"], "weight_decay": defaults["weight_decay"]}]
    seen = {}
    for i, g in enumerate(groups):
        for p in g["params"]:
            if seen.setdefault(p, i) != i:
                raise UsageError(f"parameter {names[p]!r} is in param groups {seen[p]} and {i}: one group each")
    return groups, patch
