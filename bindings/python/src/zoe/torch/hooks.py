"""The module hooks: each torch parameter points at zoe's memory exactly while a module using it
runs forward or backward, and its gradient goes into the buffer zoe lends for it.

Forward: a module's pre-hook fetches its zoe modules (layout.py) and points each parameter's .data
at zoe's copy (zero copy: param.data_ptr() is zoe_parameter_address); its post-hook points them
back at an empty tensor and releases. A zoe module used by several torch modules at once (a tied
parameter, a parent and its child) is fetched once and released when its last user is done.

Backward: a hook on the module's outputs fires when their gradient is ready, before any of the
module's backward runs; it fetches the module again and lends zoe's zero-filled gradient buffers
as param.grad, which autograd accumulates into. Each trainable parameter's post-accumulate-grad
hook counts it done; after the module's last one (a repeated module's gradient accumulates once,
after all its uses) the gradients go to zoe (zoe_reduce_gradients) and the module is released.
A module used more than once in the micro-batch's forward (a tied parameter's, a layer shared
across depths) accumulates its gradient only after its first use's backward, long after its last
use's, and a parent's own parameters may accumulate only after all its children's backward:
fetched for backward and its buffers lent all that while, such a module would hold its share of
the gathered-parameter arena and a gradient bucket that zoe cannot reduce until then, and a
single caller would wait on itself. So it is fetched for its values only (released when the next
module is fetched, fetched again by an unpack that needs it), autograd sums its gradients into
tensors of its own, and at their accumulation the module is fetched for backward and they are
copied into zoe's buffers. A zoe module without trainable parameters is fetched for its values
only and released when the next module is fetched for backward; if a later node needs it after
all, saved_tensors.py's unpack fetches it again (ensure_bound). After autograd returns,
finish_backward hands in what never completed (a parameter the loss did not reach has a zero
gradient) and closes the micro-batch.

A parameter read outside its own modules' forward (`x @ self.wte.weight.t()` in the parent's
forward, a sibling's weight inside another module) is DeepSpeed's external parameter, detected as
DeepSpeed detects it: each hooked module's _parameters is a dict that sees the read of a parameter
that is not fetched during a forward (_Parameters), and the read fetches its zoe module for the
innermost forward running: the innermost module with hooks, else the engine's call (a model whose
own forward holds no parameter has no hooks). It is released when that forward ends, and counts as
one more use in the micro-batch (its gradient accumulates after that use's backward, as a module
used twice). Autograd saves the view the read made as any saved parameter view (saved_tensors.py).
autograd accumulates a gradient into a parameter shaped as the parameter is then, and no module's
hook may have fetched one that is only read so: at its first read a hook on its gradient is added
that fetches it for backward before the accumulation.

The micro-batch opens lazily at the first fetch with grad enabled; a forward under
torch.no_grad() with no micro-batch open fetches outside one: zoe's inference fetch (no micro-batch
opened or counted, no gradients).
"""

import contextlib
import time

import torch

from ..errors import UsageError
from .tensors import over_address, placeholder

# How a zoe module is held in backward.
_LENT = "gradients lent"  # fetched for backward, its gradient buffers lent as param.grad
_VALUES = "values"  # fetched for its values only (no trainable parameter, or gradients handed in)


def _tensors(value):
    """The tensors in a module's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


class _Parameters(dict):
    """A hooked module's _parameters: nn.Module.__getattr__ reads a parameter through __getitem__,
    so the read of one that is not fetched (an empty tensor) during a forward fetches it
    (Runtime.external); torch's own iterations (named_parameters, state_dict, .to) do not come here."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime, parameters):
        super().__init__(parameters)
        self._runtime = runtime

    def __getitem__(self, key):
        param = dict.__getitem__(self, key)
        if param is not None and param.numel() == 0:  # zoe's parameters are never empty when fetched
            self._runtime.external(param)
        return param

    def __reduce__(self):
        # A copy or pickle of the module holds a plain dict, not the engine.
        return (dict, (dict(self),))


class Runtime:
    """Binds a model's parameters to zoe's memory around each module's forward and backward."""

    def __init__(self, zoe_engine, stream, layout, dtype, device):
        self._zoe = zoe_engine
        self._stream = stream
        self._layout = layout
        self._dtype = dtype
        self._device = device
        # On the host device zoe's copies run on its stream's worker: wait before computing. On
        # CUDA torch computes on zoe's stream itself (compute()), in order with zoe's copies.
        self._host = device.type == "cpu"
        self._torch_stream = None if self._host else torch.cuda.ExternalStream(stream.native, device=device)
        self._bound = {}  # zoe address -> Slot whose .data is zoe's memory there
        self._forward_users = {u: 0 for u in layout.units}
        self._backward = {}  # Unit -> _LENT / _VALUES
        self._lent = {}  # Slot -> the gradient tensor lent to it
        self._pending = {}  # Unit -> its trainable Slots whose gradient has not accumulated yet
        self._handed_in = set()  # Units whose gradients zoe has for this micro-batch
        self._uses = {u: 0 for u in layout.units}  # forward uses in this micro-batch
        # One list per forward running (the engine's call, then each hooked module's inside it):
        # the units fetched for parameters read outside their modules, released when it ends.
        self._scopes = []
        self._read_outside = set()  # Slots read outside their modules: their gradient hook is added
        self.micro_batch_open = False
        self.active = False  # inside engine(...) or engine.backward(...)
        # What zoe adds to the model's compute, for the benchmark: seconds spent inside the hooks
        # (their Python work, zoe's calls and the waits on its copies) and the bytes of gradients
        # copied into zoe's buffers after autograd summed them in tensors of its own.
        self.hook_seconds = 0.0
        self.gradient_copy_bytes = 0
        self._hooks = []
        for module, units in layout.units_of.items():
            self._hooks.append(module.register_forward_pre_hook(self.timed(self._pre_forward_hook(module, units))))
            self._hooks.append(module.register_forward_hook(self.timed(self._post_forward_hook(units))))
        for slot in layout.slots:
            if slot.trainable:
                hook = self.timed(self._accumulated_hook(slot))
                self._hooks.append(slot.param.register_post_accumulate_grad_hook(hook))
        self._watched = list(layout.params_of)
        for module in self._watched:
            module._parameters = _Parameters(self, module._parameters)

    def timed(self, hook):
        """`hook` adding the time it runs to hook_seconds (every entry point torch calls is wrapped
        once; what they call is not, so nothing counts twice)."""

        def counted(*args):
            start = time.perf_counter()
            try:
                return hook(*args)
            finally:
                self.hook_seconds += time.perf_counter() - start

        return counted

    def detach(self):
        """Removes every hook (the engine is closed)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        for module in self._watched:
            module._parameters = dict(module._parameters)
        self._watched = []

    @contextlib.contextmanager
    def compute(self):
        """Where the engine runs the model's forward and backward: hooks allowed, on zoe's stream."""
        self.active = True
        try:
            with contextlib.nullcontext() if self._torch_stream is None else torch.cuda.stream(self._torch_stream):
                yield
        finally:
            self.active = False

    @contextlib.contextmanager
    def forward_scope(self):
        """The engine's call: external parameters read where no hooked module runs are held here."""
        self._scopes.append([])
        try:
            yield
        finally:
            self._end_scope()

    def _end_scope(self):
        # After abort_forward the scopes are gone (it released everything): nothing left to end.
        if self._scopes:
            for unit in reversed(self._scopes.pop()):
                self._release_forward(unit)

    def external(self, param):
        """`param` read while not fetched: fetched for the innermost forward running, if any (else
        left as torch has it: an empty tensor outside the engine's forward)."""
        slot = self._layout.slot_of.get(param)
        if slot is None or not self.active or not self._scopes:
            return
        start = time.perf_counter()
        try:
            self._acquire_forward(slot.unit)
            self._scopes[-1].append(slot.unit)
            if slot.trainable and slot not in self._read_outside:
                self._read_outside.add(slot)
                self._hooks.append(slot.param.register_hook(self.timed(self._gradient_ready_hook(slot.unit))))
        finally:
            self.hook_seconds += time.perf_counter() - start

    def _gradient_ready_hook(self, unit):
        def hook(_grad):
            self.ensure_bound(unit)

        return hook

    def bound_slot(self, tensor):
        """The Slot whose parameter's fetched memory `tensor` lives in, or None."""
        if tensor.device != self._device:
            return None
        return self._bound.get(tensor.untyped_storage().data_ptr())

    # ---- binding ------------------------------------------------------------------------------------

    def _synchronize(self):
        if self._host:
            self._stream.synchronize()

    def _bind(self, unit):
        for slot in unit.slots:
            address = self._zoe.parameter_address(slot.id)
            slot.param.data = over_address(address, slot.shape, self._dtype, self._device)
            self._bound[address] = slot

    def _unbind(self, unit):
        for slot in unit.slots:
            self._bound.pop(slot.param.data_ptr(), None)
            slot.param.data = placeholder(self._dtype, self._device)

    def open_micro_batch(self):
        """Opens the micro-batch unless it is open: at the first fetch or save of a training forward."""
        if not self.micro_batch_open:
            self._zoe.begin_micro_batch()
            self.micro_batch_open = True

    def _fetch(self, unit, pass_):
        # Under torch.no_grad() outside a micro-batch the forward fetch is zoe's inference fetch.
        if torch.is_grad_enabled():
            self.open_micro_batch()
        self._zoe.fetch(unit.id, pass_, self._stream)
        self._synchronize()
        self._bind(unit)

    def _release(self, unit):
        self._unbind(unit)
        self._zoe.release(unit.id, self._stream)

    # ---- forward ------------------------------------------------------------------------------------

    def _pre_forward_hook(self, module, units):
        name = self._layout.module_name[module]
        params = self._layout.params_of[module]

        def hook(_module, _args):
            if not self.active:
                raise UsageError(
                    f"module {name!r} ({type(module).__name__}) ran outside the zoe engine: its parameters "
                    "live in zoe and are fetched only when the model runs as engine(...)"
                )
            self._check_parameters(module, name, params)
            for unit in units:
                self._acquire_forward(unit)
            self._scopes.append([])

        return hook

    def _check_parameters(self, module, name, params):
        for attribute, slot in params:
            p = module._parameters.get(attribute)
            if p is not slot.param:
                raise UsageError(
                    f"parameter {slot.name!r}: module {name!r}'s {attribute!r} was replaced after "
                    "zoe.torch.initialize; zoe holds the parameter it was given"
                )
            if p.numel() != 0 and self._bound.get(p.data_ptr()) is not slot:
                raise UsageError(
                    f"parameter {slot.name!r} was given new data of shape {tuple(p.shape)} after "
                    f"zoe.torch.initialize; zoe holds its value (shape {tuple(slot.shape)}): write it with "
                    "engine.load_state_dict or a checkpoint instead"
                )

    def _acquire_forward(self, unit):
        if torch.is_grad_enabled():
            self._uses[unit] += 1
        users = self._forward_users[unit]
        if users == 0 and unit not in self._backward:
            self._fetch(unit, "forward")
        self._forward_users[unit] = users + 1

    def _release_forward(self, unit):
        self._forward_users[unit] -= 1
        if self._forward_users[unit] == 0 and unit not in self._backward:
            self._release(unit)

    def _post_forward_hook(self, units):
        def fetch_for_backward(_grad):
            for unit in units:
                self.ensure_bound(unit)

        # One wrapped function per module, registered on its outputs at every forward.
        counted = self.timed(fetch_for_backward)

        def hook(_module, _args, output):
            self._end_scope()
            for unit in reversed(units):
                self._release_forward(unit)
            if torch.is_grad_enabled():
                for t in _tensors(output):
                    if t.requires_grad:
                        t.register_hook(counted)

        return hook

    def abort_forward(self):
        """After a forward that raised: releases what it left fetched (the micro-batch stays open,
        with no gradient in it yet, for the next forward)."""
        self._scopes = []
        for unit, users in self._forward_users.items():
            if users:
                self._forward_users[unit] = 0
                if unit not in self._backward:
                    self._release(unit)

    # ---- backward -----------------------------------------------------------------------------------

    def ensure_bound(self, unit):
        """Fetches `unit` for backward unless its parameters are in zoe's memory already."""
        if unit in self._backward or self._forward_users[unit]:
            return
        self._release_values()
        if unit.parent or self._uses[unit] > 1 or unit in self._handed_in or not unit.trainable:
            self._fetch(unit, "forward")
            self._backward[unit] = _VALUES
            return
        self._lend(unit)

    def _lend(self, unit):
        self._fetch(unit, "backward")
        buffers = self._zoe.module_gradients(unit.id, self._stream)
        self._synchronize()
        for slot, address in zip(unit.slots, buffers):
            if slot.trainable:
                grad = over_address(address, slot.shape, self._dtype, self._device)
                slot.param.grad = grad
                self._lent[slot] = grad
        self._pending[unit] = set(unit.trainable)
        self._backward[unit] = _LENT

    def _release_values(self):
        for unit, how in list(self._backward.items()):
            if how is _VALUES:
                del self._backward[unit]
                if not self._forward_users[unit]:
                    self._release(unit)

    def _accumulated_hook(self, slot):
        def hook(param):
            unit = slot.unit
            grad = param.grad
            if unit in self._handed_in:
                raise UsageError(
                    f"the gradient of parameter {slot.name!r} arrived after its module's gradients went to zoe "
                    "in this micro-batch: one backward per micro-batch (engine.backward), no second pass"
                )
            if self._backward.get(unit) is not _LENT:
                if self._forward_users[unit]:
                    raise UsageError(
                        f"the gradient of parameter {slot.name!r} arrived while its module {unit.name!r} runs "
                        "forward: backward inside a forward is not supported"
                    )
                # A module used several times, a parent, or a parameter used outside its modules'
                # calls: autograd made a gradient tensor of its own. Lend zoe's buffer now, copy it in.
                if self._backward.pop(unit, None) is _VALUES:
                    self._release(unit)
                self._lend(unit)
            lent = self._lent[slot]
            if grad is not lent:
                lent.add_(grad)
                param.grad = lent
                self.gradient_copy_bytes += grad.numel() * grad.element_size()
            pending = self._pending[unit]
            pending.discard(slot)
            if not pending:
                self._hand_in(unit)

        return hook

    def _hand_in(self, unit):
        for slot in unit.trainable:
            slot.param.grad = None
            del self._lent[slot]
        del self._pending[unit]
        del self._backward[unit]
        self._handed_in.add(unit)
        self._zoe.reduce_gradients(unit.id, self._stream)
        if not self._forward_users[unit]:
            self._release(unit)

    def finish_backward(self):
        """After autograd: hands in the gradients of modules not complete (a parameter the loss did
        not reach keeps zoe's zero), releases the rest and closes the micro-batch."""
        for unit, how in list(self._backward.items()):
            if how is _LENT:
                self._hand_in(unit)
        self._release_values()
        self._handed_in.clear()
        self._uses = dict.fromkeys(self._uses, 0)
        self._zoe.end_micro_batch()
        self.micro_batch_open = False
