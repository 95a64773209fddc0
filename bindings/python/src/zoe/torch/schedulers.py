"""DeepSpeed's `scheduler` configuration block, for zoe.torch.initialize.

A DeepSpeed configuration may carry

    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, ...}}

and DeepSpeed's engine then builds that schedule over its optimizer and steps it after every
optimizer step it applies (not after a step skipped for an fp16 overflow). `build(block, optimizer)`
does the same for zoe: the schedules below set each parameter group's "lr" to the value DeepSpeed's
deepspeed/runtime/lr_schedules.py sets at the same iteration, so a script moved from DeepSpeed sees
the same learning rates step for step. A `type` that names none of them but a class of
torch.optim.lr_scheduler builds that class with `params` as keyword arguments, as DeepSpeed does.

Every schedule here keeps one counter, `last_batch_iteration` (-1 before the first step), and
state_dict() / load_state_dict() hold just that, in DeepSpeed's format.
"""

import inspect
import math
import warnings

__all__ = ["build", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "LRRangeTest"]

_LOG = "log"
_LINEAR = "linear"


class _Schedule:
    """What every schedule shares: the counter, step(), the state and the last lrs.

    A subclass gives `_lrs()`: the lr of each parameter group at `last_batch_iteration`.
    """

    def __init__(self, optimizer, last_batch_iteration):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(
                f"zoe.torch scheduler: the optimizer ({type(optimizer).__name__}) has no param_groups"
            )
        self.optimizer = optimizer
        self.last_batch_iteration = _integer(last_batch_iteration, "last_batch_iteration")
        self._last_lr = None

    def _start(self, last_batch_iteration):
        # DeepSpeed sets the groups' lrs at construction only when it starts from the beginning; a
        # schedule resumed at a later iteration leaves them to the optimizer's restored state.
        if last_batch_iteration == -1:
            self._apply()

    def _apply(self):
        groups = self.optimizer.param_groups
        for group, lr in zip(groups, self._lrs()):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in groups]

    def step(self, last_batch_iteration=None):
        """Advances to the next iteration (or to `last_batch_iteration`) and sets the groups' lrs."""
        if last_batch_iteration is None:
            last_batch_iteration = self.last_batch_iteration + 1
        self.last_batch_iteration = _integer(last_batch_iteration, "last_batch_iteration")
        self._apply()

    def get_lr(self):
        """The lrs this schedule gives at its current iteration (does not set them)."""
        return list(self._lrs())

    def get_last_lr(self):
        """The lr of each parameter group as the last step (or the construction) set it."""
        if self._last_lr is None:
            raise RuntimeError(f"{type(self).__name__}.get_last_lr(): step() has not been called yet")
        return list(self._last_lr)

    def state_dict(self):
        return {"last_batch_iteration": self.last_batch_iteration}

    def load_state_dict(self, state):
        """Restores the iteration and sets the groups' lrs for it.

        DeepSpeed restores the lrs through the optimizer's own state; zoe's optimizer shim keeps
        no such copy, so the lrs are set here, to the same values.
        """
        if "last_batch_iteration" not in state:
            raise KeyError(f"{type(self).__name__}.load_state_dict: no 'last_batch_iteration' in the state")
        self.last_batch_iteration = _integer(state["last_batch_iteration"], "last_batch_iteration")
        self._apply()


class _Warmup(_Schedule):
    """The warm-up ramp WarmupLR, WarmupDecayLR and WarmupCosineLR share: a fraction in [0, 1]
    that rises over warmup_num_steps, logarithmically or linearly."""

    def __init__(self, optimizer, warmup_num_steps, warmup_type, last_batch_iteration, unknown_type_is_log):
        super().__init__(optimizer, last_batch_iteration)
        # DeepSpeed never warms up over fewer than 2 steps (log(1) would divide by zero).
        self.warmup_num_steps = max(2, _integer(warmup_num_steps, "warmup_num_steps"))
        if warmup_type not in (_LOG, _LINEAR):
            if not unknown_type_is_log:
                raise ValueError(
                    f"scheduler.params.warmup_type: {warmup_type!r} is neither 'log' nor 'linear'"
                )
            # DeepSpeed's WarmupLR and WarmupDecayLR warn and fall back to log; so does zoe, so
            # the same configuration file trains the same way.
            warnings.warn(
                f"scheduler.params.warmup_type: unknown {warmup_type!r}, using 'log' as DeepSpeed does",
                stacklevel=3,
            )
            warmup_type = _LOG
        self.warmup_type = warmup_type
        # A reciprocal multiplied, not a division, so the lrs are DeepSpeed's to the last bit.
        self._inverse_log_warmup = 1.0 / math.log(self.warmup_num_steps)

    def _warmup_fraction(self):
        """The ramp's value at last_batch_iteration, which must be in [0, warmup_num_steps)."""
        if self.warmup_type == _LOG:
            return self._inverse_log_warmup * math.log(self.last_batch_iteration + 1)
        return self.last_batch_iteration / self.warmup_num_steps


class WarmupLR(_Warmup):
    """lr rises from warmup_min_lr to warmup_max_lr over warmup_num_steps steps, then stays there."""

    def __init__(
        self,
        optimizer,
        warmup_min_lr=0.0,
        warmup_max_lr=0.001,
        warmup_num_steps=1000,
        warmup_type=_LOG,
        last_batch_iteration=-1,
    ):
        super().__init__(optimizer, warmup_num_steps, warmup_type, last_batch_iteration, True)
        self.min_lrs = _per_group(optimizer, warmup_min_lr, "warmup_min_lr")
        self.max_lrs = _per_group(optimizer, warmup_max_lr, "warmup_max_lr")
        self._start(last_batch_iteration)

    def _gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_fraction()
        return 1.0

    def _lrs(self):
        if self.last_batch_iteration < 0:
            return self.min_lrs
        gamma = self._gamma()
        return [lo + (hi - lo) * gamma for lo, hi in zip(self.min_lrs, self.max_lrs)]


class WarmupDecayLR(WarmupLR):
    """WarmupLR's warm-up, then a linear decay to 0 at total_num_steps."""

    def __init__(
        self,
        optimizer,
        total_num_steps,
        warmup_min_lr=0.0,
        warmup_max_lr=0.001,
        warmup_num_steps=1000,
        warmup_type=_LOG,
        last_batch_iteration=-1,
    ):
        # Set before the base class applies the first lrs, which reads it.
        self.total_num_steps = _integer(total_num_steps, "total_num_steps")
        super().__init__(
            optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type, last_batch_iteration
        )
        if self.total_num_steps < self.warmup_num_steps:
            warnings.warn(
                f"scheduler.params: total_num_steps {total_num_steps} is less than "
                f"warmup_num_steps {warmup_num_steps}",
                stacklevel=2,
            )

    def _gamma(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            return self._warmup_fraction()
        remaining = float(self.total_num_steps - self.last_batch_iteration)
        return max(0.0, remaining / float(max(1.0, self.total_num_steps - self.warmup_num_steps)))


class WarmupCosineLR(_Warmup):
    """The optimizer's own lr times a ratio that rises from warmup_min_ratio to 1 over
    warmup_num_steps, then follows a half cosine down to cos_min_ratio at total_num_steps."""

    def __init__(
        self,
        optimizer,
        total_num_steps,
        warmup_min_ratio=0.0,
        warmup_num_steps=1000,
        cos_min_ratio=0.0001,
        warmup_type=_LOG,
        last_batch_iteration=-1,
    ):
        # DeepSpeed's cosine schedule has no fallback for an unknown warmup_type (it fails at the
        # first step), so zoe refuses it at once.
        super().__init__(optimizer, warmup_num_steps, warmup_type, last_batch_iteration, False)
        self.total_num_steps = _integer(total_num_steps, "total_num_steps")
        self.warmup_min_ratio = float(warmup_min_ratio)
        self.cos_min_ratio = float(cos_min_ratio)
        if self.total_num_steps <= self.warmup_num_steps:
            # DeepSpeed warns at < and divides by zero at ==, after the warm-up; refuse the latter.
            if self.total_num_steps == self.warmup_num_steps:
                raise ValueError(
                    f"scheduler.params.total_num_steps ({total_num_steps}) must exceed "
                    f"warmup_num_steps ({self.warmup_num_steps}) for WarmupCosineLR"
                )
            warnings.warn(
                f"scheduler.params: total_num_steps {total_num_steps} is less than "
                f"warmup_num_steps {warmup_num_steps}",
                stacklevel=2,
            )
        self.org_lrs = [group["lr"] for group in optimizer.param_groups]
        self._start(last_batch_iteration)

    def _ratio(self):
        if self.last_batch_iteration < self.warmup_num_steps:
            rise = self._warmup_fraction()
            return self.warmup_min_ratio + rise * (1.0 - self.warmup_min_ratio)
        done = self.last_batch_iteration - self.warmup_num_steps + 1
        span = self.total_num_steps - self.warmup_num_steps
        half_cosine = (1 + math.cos(math.pi * done / span)) / 2
        return max(0.0, self.cos_min_ratio + (1.0 - self.cos_min_ratio) * half_cosine)

    def _lrs(self):
        if self.last_batch_iteration < 0:
            # DeepSpeed returns a single 0.0 here, which sets the first group's lr alone to 0 before
            # the first step (the others keep the optimizer's lr); kept, so the first step matches.
            return [0.0]
        ratio = self._ratio()
        return [lr * ratio for lr in self.org_lrs]


class LRRangeTest(_Schedule):
    """lr grows from lr_range_test_min_lr by lr_range_test_step_rate every
    lr_range_test_step_size steps, continuously or as a staircase (the LR range test)."""

    def __init__(
        self,
        optimizer,
        lr_range_test_min_lr=1e-3,
        lr_range_test_step_size=2000,
        lr_range_test_step_rate=1.0,
        lr_range_test_staircase=False,
        last_batch_iteration=-1,
    ):
        super().__init__(optimizer, last_batch_iteration)
        self.min_lrs = _per_group(optimizer, lr_range_test_min_lr, "lr_range_test_min_lr")
        self.step_size = _integer(lr_range_test_step_size, "lr_range_test_step_size")
        if self.step_size <= 0:
            raise ValueError(f"scheduler.params.lr_range_test_step_size: {self.step_size} is not positive")
        self.step_rate = float(lr_range_test_step_rate)
        self.staircase = bool(lr_range_test_staircase)
        self._start(last_batch_iteration)

    def _lrs(self):
        interval = float(self.last_batch_iteration + 1) / self.step_size
        if self.staircase:
            interval = math.floor(interval)
        increase = 1 + self.step_rate * interval
        return [lr * increase for lr in self.min_lrs]


_SCHEDULES = {cls.__name__: cls for cls in (WarmupLR, WarmupDecayLR, WarmupCosineLR, LRRangeTest)}


def build(block, optimizer):
    """Builds the schedule a DeepSpeed `scheduler` block describes, over `optimizer`.

    block: {"type": name, "params": {...}}; name is one of WarmupLR, WarmupDecayLR,
    WarmupCosineLR, LRRangeTest (DeepSpeed's, same parameters and defaults) or a class of
    torch.optim.lr_scheduler (then `optimizer` must be a torch.optim.Optimizer). A schedule that
    starts from the beginning sets the groups' lrs at once, as DeepSpeed's do, so the first
    optimizer step runs at the schedule's first lr. WarmupCosineLR scales the lr each group holds
    when build() is called: set the optimizer's lr first.

    Returns the schedule; call its step() after each optimizer step that was applied.
    Raises ValueError naming the key for an unknown type, a misspelt or missing parameter, or a
    value out of range; TypeError for an optimizer without param_groups.
    OneCycle is not implemented here: asking for it raises ValueError saying so (a schedule from
    elsewhere that sets the groups' lr and betas each step works: the step reads both).
    """
    if not isinstance(block, dict):
        raise ValueError(f"scheduler: expected an object with 'type' and 'params', got {type(block).__name__}")
    if "type" not in block:
        raise ValueError("scheduler.type: missing (the schedule's name, e.g. 'WarmupLR')")
    name = block["type"]
    params = block.get("params", {})
    if not isinstance(params, dict):
        raise ValueError(f"scheduler.params: expected an object, got {type(params).__name__}")
    unknown_keys = set(block) - {"type", "params"}
    if unknown_keys:
        raise ValueError(f"scheduler: unknown key(s) {sorted(unknown_keys)} (only 'type' and 'params')")
    if name == "OneCycle":
        raise ValueError(
            "scheduler.type: OneCycle is not implemented by zoe.torch; use WarmupLR, WarmupDecayLR, "
            "WarmupCosineLR or LRRangeTest, or pass a scheduler of your own that sets the param_groups' "
            "lr and betas (zoe's step reads both)"
        )
    cls = _SCHEDULES.get(name) or _torch_scheduler(name)
    if cls is None:
        raise ValueError(
            f"scheduler.type: {name!r} is neither one of {sorted(_SCHEDULES)} nor a class of "
            "torch.optim.lr_scheduler"
        )
    _check_params(cls, name, params)
    return cls(optimizer, **params)


def _check_params(cls, name, params):
    """Names a misspelt or missing parameter as the configuration key, before the constructor
    would fail with a TypeError about a Python argument."""
    signature = inspect.signature(cls.__init__)
    accepted = [p for p in list(signature.parameters.values())[2:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    names = {p.name for p in accepted}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(f"scheduler.params: {unknown} not parameters of {name} (it takes {sorted(names)})")
    missing = sorted(p.name for p in accepted if p.default is p.empty and p.name not in params)
    if missing:
        raise ValueError(f"scheduler.params: {name} needs {missing}")


def _torch_scheduler(name):
    try:
        import torch.optim.lr_scheduler as torch_schedulers
    except ImportError:
        return None
    cls = getattr(torch_schedulers, name, None)
    return cls if isinstance(cls, type) else None


def _per_group(optimizer, value, key):
    """A scalar for every group, or a list with one value per group (DeepSpeed accepts both)."""
    count = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(
                f"scheduler.params.{key}: {len(value)} values for {count} parameter groups"
            )
        return [float(v) for v in value]
    return [float(value)] * count


def _integer(value, key):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"scheduler.params.{key}: {value!r} is not an integer")
    return int(value)
