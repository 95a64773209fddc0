"""How a torch.nn.Module becomes a zoe model: which zoe module each parameter lives in.

Every torch module with parameters of its own (recurse=False) is one zoe module, the unit of fetch
and release, holding those parameters in their registration order. A parameter registered in
several modules (tied: GPT-2's token embedding and head) is stored once, in a zoe module of its
own named by its first name, which every module using it fetches alongside its own, so it is
present whichever of them runs. Buffers stay with torch.
"""

from ..errors import UsageError
from ..model import Model
from .tensors import ZOE_DTYPES


class Slot:
    """One torch parameter in zoe: its zoe id, its zoe module (a Unit) and what zoe was told."""

    __slots__ = ("param", "name", "id", "unit", "shape", "trainable", "group")

    def __init__(self, param, name, unit, trainable, group):
        self.param = param
        self.name = name
        self.unit = unit
        self.shape = param.shape
        self.trainable = trainable
        self.group = group
        self.id = None


class Unit:
    """One zoe module: the parameters fetched and released together."""

    __slots__ = ("id", "name", "slots", "trainable", "parent")

    def __init__(self, name):
        self.name = name
        self.slots = []
        self.trainable = ()  # the slots that take a gradient (set once the layout is complete)
        self.parent = False  # used by a torch module whose submodules have parameters too
        self.id = None


def _check_dtype(name, param):
    if param.dtype not in ZOE_DTYPES:
        raise UsageError(
            f"parameter {name!r} is {param.dtype}: zoe keeps float32 parameters (float16 / bfloat16 with "
            "the configuration's fp16 / bf16 block); convert the model (model.float()) first"
        )
    if param.numel() == 0:
        raise UsageError(f"parameter {name!r} has no elements (shape {tuple(param.shape)}): zoe cannot keep it")


class Layout:
    """The zoe modules and parameters of `model`. group_of maps a trainable parameter to its
    optimizer group's index; a parameter that does not require grad is frozen."""

    def __init__(self, model, group_of):
        users = {}  # parameter -> names of the modules registering it
        first_name = {}
        modules = []
        for module_name, module in model.named_modules():
            own = [(n, p) for n, p in module._parameters.items() if p is not None]
            if own:
                modules.append((module_name, module, own))
            for n, p in own:
                users.setdefault(p, []).append(module_name)
                first_name.setdefault(p, f"{module_name}.{n}" if module_name else n)
        for p, name in first_name.items():
            _check_dtype(name, p)
            if p.requires_grad and p not in group_of:
                raise UsageError(
                    f"parameter {name!r} requires grad but is in no optimizer param group: add it to one, "
                    "or set requires_grad=False to freeze it"
                )
        self.units = []
        self.slot_of = {}  # parameter -> Slot
        self.units_of = {}  # torch module -> the Units its forward needs
        self.params_of = {}  # torch module -> (its attribute name, Slot) of each parameter it registers
        self.module_name = {}
        tied = {}
        for module_name, module, own in modules:
            needs = []
            unit = None
            for _, p in own:
                if len(users[p]) > 1:
                    if p not in tied:
                        tied[p] = self._add_unit(first_name[p])
                        self._add_slot(tied[p], p, first_name[p], group_of)
                    if tied[p] not in needs:
                        needs.append(tied[p])
                    continue
                if unit is None:
                    unit = self._add_unit(module_name or "<root>")
                    needs.insert(0, unit)
                self._add_slot(unit, p, first_name[p], group_of)
            self.units_of[module] = needs
            if any(m._parameters for m in module.modules() if m is not module):
                for u in needs:
                    u.parent = True
            self.params_of[module] = [(n, self.slot_of[p]) for n, p in own]
            self.module_name[module] = module_name or "<root>"
        self.slots = [s for u in self.units for s in u.slots]
        # Read by the hooks for every module in every backward: computed once here.
        for u in self.units:
            u.trainable = tuple(s for s in u.slots if s.trainable)

    def _add_unit(self, name):
        unit = Unit(name)
        self.units.append(unit)
        return unit

    def _add_slot(self, unit, param, name, group_of):
        slot = Slot(param, name, unit, param.requires_grad, group_of.get(param, 0))
        unit.slots.append(slot)
        self.slot_of[param] = slot

    def zoe_model(self, dtype, values=None):
        """A zoe.Model of these modules and parameters, working copies in `dtype`; values(slot) gives
        a parameter's initial value (float32, numel values), None: zeros (for a footprint plan)."""
        model = Model()
        try:
            for unit in self.units:
                unit.id = model.add_module(unit.name)
                for slot in unit.slots:
                    slot.id = model.add_parameter(
                        unit.id,
                        slot.name,
                        tuple(slot.shape),
                        dtype=ZOE_DTYPES[dtype],
                        data=None if values is None else values(slot),
                        frozen=not slot.trainable,
                        group=slot.group,
                    )
        except BaseException:
            model.close()
            raise
        return model
