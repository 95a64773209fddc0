"""zoe.torch.Init: build a model whose parameters never sit whole in host memory.

    with zoe.torch.Init(config=cfg):
        model = build()                      # each module's parameters leave memory as it is built
    engine, optimizer, _, _ = zoe.torch.initialize(model=model, config=cfg)

As deepspeed.zero.Init does, the context wraps the __init__ of every torch.nn.Module class (those
that exist and those defined inside it). When the __init__ of a module finishes (the outermost one
for that object, so a subclass that re-initialises what its parent created is seen whole), each of
its own parameters not yet taken is written to a spool file and its storage replaced by a shared
memory map of that file. The parameter keeps its shape, dtype and values, so the rest of the
construction (tying, `self.apply(init_weights)`, reading shapes) works as without the context;
what it touches lives in the page cache, which the kernel may reclaim, not in the process's own
memory. The peak during construction is thus about the largest module's own parameters.

The spool file lies in the configuration's NVMe folder (offload_param.nvme_path, else
offload_optimizer.nvme_path), else the system's temporary folder, or `spool_dir`. It is unlinked
as soon as it is opened: nothing is left behind, even by a killed process, and its space returns
once every parameter is released.

zoe.torch.initialize takes each parameter's values with `initial_values(param)` and then calls
`release_spool(params)`. Buffers (register_buffer) stay with torch, as the engine leaves them.
"""

import ctypes
import functools
import json
import mmap
import os
import tempfile
import threading

import numpy as np
import torch

__all__ = ["Init", "initial_values", "release_spool", "is_spooled"]

# The spool record a parameter carries while its storage is the spool's map.
_RECORD = "_zoe_spool"
# How many wrapped __init__s of a module object are running (set on the object while it is built).
_DEPTH = "_zoe_init_depth"

_state_lock = threading.Lock()
_active = []  # the Init contexts entered and not yet left (nesting: only the outermost patches)


class _Record:
    """Where a parameter's initial values lie: the tensor over the spool's map, which keeps the map
    alive, and its address (param.data at another address later means the caller replaced it, and
    those values win)."""

    __slots__ = ("map", "values", "data_ptr")

    def __init__(self, mapped, values):
        self.map = mapped
        self.values = values
        self.data_ptr = values.data_ptr()

    def drop_pages(self):
        """Unmaps the pages the process touched (an initialisation after the module's own, such
        as a parent's `self.apply(init_weights)`); their contents stay in the file."""
        self.map.madvise(mmap.MADV_DONTNEED)


class Init:
    """Context manager: parameters created inside it are spooled out of host memory as their
    module's __init__ finishes (see the module's docstring).

    config: the DeepSpeed configuration (dict, path to a JSON file, or None), read for its NVMe
        folder only.
    spool_dir: a folder for the spool file, overriding the configuration's.
    enabled: False makes the context do nothing (as deepspeed.zero.Init's `enabled`).
    module: an already built module whose parameters are spooled at once (deepspeed.zero.Init's
        `module=`); the context then has nothing left to do.
    config_dict_or_path, and DeepSpeed's other arguments (data_parallel_group, remote_device,
        pin_memory, mpu, dtype, ...), are accepted so a DeepSpeed script runs unchanged;
        `config_dict_or_path` is read as `config`, the others change nothing: each parameter keeps
        its dtype (initialize casts for bf16/fp16 as it does without Init), and one built on a GPU
        is spooled from there and left on the CPU map, where initialize finds it.

    Raises ValueError naming the key when the configured nvme_path does not exist (the engine
    would refuse it too). Patches the torch.nn.Module classes process-wide while entered: build
    models on one thread at a time under it. Leaving the context (also by an exception) restores
    every class; parameters already spooled stay valid. Contexts nest; the outermost spools.
    """

    def __init__(self, module=None, config=None, *, spool_dir=None, enabled=True,
                 config_dict_or_path=None, **deepspeed_arguments):
        if config is None:
            config = config_dict_or_path
        self._enabled = bool(enabled)
        self._spool_dir = spool_dir if spool_dir is not None else _spool_folder(config)
        if not os.path.isdir(self._spool_dir):
            raise ValueError(f"zoe.torch.Init: spool folder {self._spool_dir!r} does not exist")
        self._spool = None
        self._wrapped = {}  # class -> its own __init__ before wrapping
        self._init_subclass = None  # what torch.nn.Module held before the patch, to put back
        self._init_functions = {}  # name -> torch.nn.init's function before wrapping
        if module is not None and self._enabled:
            spool = _Spool(self._spool_dir)
            try:
                for sub in module.modules():
                    spool.take_parameters_of(sub)
            finally:
                spool.close()

    def __enter__(self):
        if not self._enabled:
            return self
        with _state_lock:
            _active.append(self)
            if len(_active) > 1:
                return self  # the outermost context already patches every class
        try:
            self._spool = _Spool(self._spool_dir)
            for cls in _module_classes():
                self._wrap(cls)
            self._patch_init_subclass()
            self._wrap_init_functions()
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(self, *exc):
        if self._enabled:
            self._restore()
        return False

    def _restore(self):
        with _state_lock:
            if self in _active:
                _active.remove(self)
        for cls, original in self._wrapped.items():
            cls.__init__ = original
        self._wrapped.clear()
        if self._init_subclass is not None:
            (own,) = self._init_subclass
            if own is not None:
                torch.nn.Module.__init_subclass__ = own
            else:
                del torch.nn.Module.__init_subclass__
            self._init_subclass = None
        for name, original in self._init_functions.items():
            setattr(torch.nn.init, name, original)
        self._init_functions.clear()
        if self._spool is not None:
            self._spool.close()  # the maps keep what was spooled
            self._spool = None

    def _wrap(self, cls):
        original = cls.__dict__.get("__init__")
        if original is None or cls in self._wrapped:
            return  # inherits a wrapped __init__, or is wrapped already
        spool = self._spool

        @functools.wraps(original)
        def __init__(module, *args, **kwargs):
            # The first wrapper entered for an object is its most derived class's: only that one
            # spools, after the whole construction, so a subclass's re-initialisation is kept.
            depth = module.__dict__.get(_DEPTH, 0)
            object.__setattr__(module, _DEPTH, depth + 1)
            try:
                original(module, *args, **kwargs)
            finally:
                if depth:
                    object.__setattr__(module, _DEPTH, depth)
                else:
                    object.__delattr__(module, _DEPTH)
            if not depth:
                spool.take_parameters_of(module)
                spool.drop_pages_of(module)

        self._wrapped[cls] = original
        cls.__init__ = __init__

    def _patch_init_subclass(self):
        """Classes defined inside the context are wrapped as they are created."""
        own = torch.nn.Module.__dict__.get("__init_subclass__")
        self._init_subclass = (own,)
        wrap = self._wrap

        def __init_subclass__(cls, **kwargs):
            if own is not None:
                own.__func__(cls, **kwargs)
            else:
                super(torch.nn.Module, cls).__init_subclass__(**kwargs)
            wrap(cls)

        torch.nn.Module.__init_subclass__ = classmethod(__init_subclass__)


    def _wrap_init_functions(self):
        """torch.nn.init's in-place initialisers drop the pages they wrote of a spooled parameter
        at once, so a parent that re-initialises its whole tree (GPT-2's
        `nn.init.normal_(p, std=0.02)` over named_parameters()) touches one parameter at a time
        instead of the model. (Tensor methods such as `p.data.normal_()` are not seen: their
        pages go when the module's __init__ finishes.)"""
        for name in dir(torch.nn.init):
            original = getattr(torch.nn.init, name)
            if name.startswith("_") or not name.endswith("_") or not callable(original):
                continue

            def initialiser(tensor, *args, _original=original, **kwargs):
                result = _original(tensor, *args, **kwargs)
                record = getattr(tensor, _RECORD, None)
                if record is not None:
                    record.drop_pages()
                return result

            functools.update_wrapper(initialiser, original)
            self._init_functions[name] = original
            setattr(torch.nn.init, name, initialiser)


class _Spool:
    """One unlinked file that parameters are appended to, each at a page boundary and mapped
    back shared, so the parameter's tensor reads and writes the file's pages."""

    def __init__(self, folder):
        descriptor, path = tempfile.mkstemp(prefix="zoe-init-", suffix=".spool", dir=folder)
        os.unlink(path)  # the maps keep the data; nothing is left behind, even by a killed process
        self._descriptor = descriptor
        self._end = 0

    def close(self):
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None

    def take_parameters_of(self, module):
        taken = 0
        for param in module.parameters(recurse=False):
            if getattr(param, _RECORD, None) is None:
                taken += self._take(param)
        if taken and _malloc_trim is not None:
            # glibc keeps the freed copies in its heap (torch's large allocations stop being
            # mapped apart once the first is freed); without handing them back the process would
            # grow by the model's size after all.
            _malloc_trim(0)

    @staticmethod
    def drop_pages_of(module):
        """Keeps what a finished __init__ wrote into its submodules' spooled parameters out of the
        process's memory (once per module and per level of nesting: cheap next to the writes)."""
        for param in module.parameters():
            record = getattr(param, _RECORD, None)
            if record is not None:
                record.drop_pages()

    def _take(self, param):
        data = param.data.detach().cpu().contiguous()
        nbytes = data.numel() * data.element_size()
        if nbytes == 0:
            return 0
        offset = self._end
        raw = memoryview(data.view(torch.uint8).reshape(-1).numpy())
        written = 0
        while written < nbytes:
            written += os.pwrite(self._descriptor, raw[written:], offset + written)
        self._end = _round_up(offset + nbytes, mmap.ALLOCATIONGRANULARITY)
        mapped = mmap.mmap(self._descriptor, nbytes, offset=offset)
        values = torch.frombuffer(mapped, dtype=data.dtype, count=data.numel()).view(data.shape)
        del data, raw  # the last reference to the parameter's own copy goes with param.data below
        param.data = values
        setattr(param, _RECORD, _Record(mapped, values))
        return nbytes


def _find_malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None  # not glibc: its allocator is left as it is


_malloc_trim = _find_malloc_trim()


def _round_up(value, multiple):
    return (value + multiple - 1) // multiple * multiple


def is_spooled(param):
    """True when `param` was built under zoe.torch.Init and its spool is not yet released."""
    return getattr(param, _RECORD, None) is not None


def initial_values(param):
    """The values of a parameter built under zoe.torch.Init, as a flat float32 numpy array; None
    for a parameter that was not (use param.data as usual).

    For an fp32 parameter the array is a read-only view of the spool's map (no copy; valid until
    release_spool(param)), so initialize can hand every parameter's values to zoe at once without
    the model entering the process's own memory; a 16-bit parameter's values are converted into a
    new array. If the caller replaced param.data after the construction, those values are returned.
    """
    record = getattr(param, _RECORD, None)
    if record is None:
        return None
    current = param.data
    if current.data_ptr() != record.data_ptr:
        return current.detach().to(device="cpu", dtype=torch.float32).reshape(-1).numpy().copy()
    flat = record.values.reshape(-1)
    if flat.dtype != torch.float32:
        return flat.to(torch.float32).numpy()
    view = flat.numpy().view()
    view.flags.writeable = False
    return view


def release_spool(params):
    """Drops the spool of one parameter or of an iterable of them (those not built under Init are
    skipped): each parameter's data becomes an empty tensor of its dtype (zoe's engine gives it its
    storage from then on), and the file's pages go once no array from initial_values still
    refers to them."""
    if isinstance(params, torch.Tensor):
        params = [params]
    for param in params:
        record = getattr(param, _RECORD, None)
        if record is None:
            continue
        param.data = torch.empty(0, dtype=param.dtype, device=param.device)
        delattr(param, _RECORD)


def _spool_folder(config):
    """The configuration's NVMe folder (parameters' first), else the temporary folder."""
    if config is None:
        return tempfile.gettempdir()
    if isinstance(config, (str, os.PathLike)):
        with open(config, encoding="utf-8") as handle:
            config = json.load(handle)
    if not isinstance(config, dict):
        raise ValueError(f"zoe.torch.Init: config must be a dict or a path, got {type(config).__name__}")
    zero = config.get("zero_optimization") or {}
    for block in ("offload_param", "offload_optimizer"):
        path = (zero.get(block) or {}).get("nvme_path")
        if path:
            if not os.path.isdir(path):
                raise ValueError(f"zoe.torch.Init: zero_optimization.{block}.nvme_path {path!r} does not exist")
            return path
    return tempfile.gettempdir()


def _module_classes():
    """Every subclass of torch.nn.Module defined so far (and Module itself), each once."""
    seen = []
    stack = [torch.nn.Module]
    visited = set()
    while stack:
        cls = stack.pop()
        if cls in visited:
            continue
        visited.add(cls)
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen
