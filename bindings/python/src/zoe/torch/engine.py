"""zoe.torch.initialize and the engine it returns, with deepspeed.initialize's shape.

initialize maps the model onto zoe (layout.py), takes its current weights into zoe's tiers, frees
torch's copies (each parameter's .data becomes an empty tensor) and installs the hooks (hooks.py)
that fetch the weights around each module's forward and backward. engine(...) runs the model;
engine.backward(loss) runs autograd into zoe's gradient buffers and closes the micro-batch;
engine.step() is zoe's optimizer step (clipping, loss scale, Adam on whatever tier holds each
state) at the gradient accumulation boundary and a no-op elsewhere, as DeepSpeed's.
"""

import os

import torch

from ..device import Stream
from ..engine import Engine as ZoeEngine
from ..errors import ConfigError, UsageError
from ..plan import footprint_plan as zoe_footprint_plan
from . import config as config_module
from . import schedulers, state
from .hooks import Runtime
from .init_context import initial_values, release_spool
from .launch import engine_comm
from .layout import Layout
from .optimizer import ZoeOptimizer, param_groups
from .saved_tensors import SavedTensors
from .tensors import placeholder

# Saved tensors smaller than this stay with autograd even when zoe.activations has room: below it
# the store's bookkeeping costs more than the memory it frees.
DEFAULT_ACTIVATION_MIN_BYTES = 1 << 20


def _shared_values(slot):
    """A parameter's values as zoe_engine_create can read them without a copy (a zoe.torch.Init
    spool's, or a CPU float32 contiguous tensor's own memory); None for one that needs converting,
    which initialize writes after the engine is made, one at a time (zoe_write_state), so the
    converted copies of the whole model never exist at once."""
    spooled = initial_values(slot.param)
    if spooled is not None:
        return spooled
    values = slot.param.detach()
    if values.dtype == torch.float32 and values.device.type == "cpu" and values.is_contiguous():
        return values.numpy().reshape(-1)
    return None


def _torch_device(zoe_device):
    if zoe_device.kind == "host":
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _prepare(model, config, optimizer, model_parameters):
    """The configuration, the groups and the layout initialize and footprint_plan both need."""
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    document = config_module.load(config)
    groups, patch = param_groups(model, optimizer, model_parameters, config_module.Settings(document))
    settings = config_module.Settings(document, patch)
    layout = Layout(model, {p: i for i, g in enumerate(groups) for p in g["params"] if p.requires_grad})
    return document, patch, settings, groups, layout


def footprint_plan(model, config, optimizer=None, model_parameters=None, world_size=1):
    """zoe.footprint_plan of the engine initialize would make of this model and configuration
    (a dict of bytes per tier), without making it: to pick a device budget first."""
    document, patch, settings, _, layout = _prepare(model, config, optimizer, model_parameters)
    with layout.zoe_model(settings.dtype) as zoe_model:
        return zoe_footprint_plan(zoe_model, document, world_size=world_size, config_overrides=patch)


class Engine:
    """What zoe.torch.initialize returns first: the model run through zoe."""

    def __init__(self, model, config, optimizer=None, model_parameters=None, lr_scheduler=None, device=None,
                 activation_min_bytes=DEFAULT_ACTIVATION_MIN_BYTES):
        document, patch, settings, groups, layout = _prepare(model, config, optimizer, model_parameters)
        self._layout = layout
        self.optimizer = ZoeOptimizer(groups, dict(settings.optimizer_defaults))
        # Before zoe's engine exists: a scheduler that cannot be built leaves nothing to undo.
        self.lr_scheduler = self._scheduler(lr_scheduler, settings)
        converted = []  # the slots whose values _shared_values could not share

        def values(slot):
            shared = _shared_values(slot)
            if shared is None:
                converted.append(slot)
            return shared

        with layout.zoe_model(settings.dtype, values=values) as zoe_model:
            # The ranks of the launch: mpirun's (zoe's own backend) or torchrun's (its process group).
            self._zoe = ZoeEngine(zoe_model, document, device=device, config_overrides=patch, **engine_comm())
        try:
            for slot in converted:
                self._zoe.write_state(slot.id, slot.param.detach().to("cpu", torch.float32).numpy())
            self._device = _torch_device(self._zoe.device)
            self._stream = Stream(self._zoe.device)
            # DeepSpeed's batch keys as zoe's engine resolved them for its world size.
            self._batch = self._zoe.batch_sizes()
        except BaseException:
            self._zoe.close()  # the model keeps its values: torch's copies are freed only below
            raise
        # zoe holds the values now: torch's copies go (the model runs on zoe's while fetched).
        for slot in layout.slots:
            release_spool(slot.param)  # built under zoe.torch.Init: its spool file's share goes too
            slot.param.data = placeholder(settings.dtype, self._device)
        for sub in model.modules():
            for name, buffer in sub._buffers.items():
                if buffer is not None:
                    dtype = settings.dtype if buffer.is_floating_point() else buffer.dtype
                    sub._buffers[name] = buffer.to(self._device, dtype)
        self.module = model
        self._runtime = Runtime(self._zoe, self._stream, layout, settings.dtype, self._device)
        self._saved = SavedTensors(
            self._runtime, self._zoe, self._stream, self._device, settings.activations, activation_min_bytes
        )
        self.optimizer._apply = self._optimizer_step
        self.global_steps = 0
        self.skipped_steps = 0
        self.micro_steps = 0
        self._backwards = 0  # backward passes since the last optimizer step
        self._last_step = None

    def _scheduler(self, lr_scheduler, settings):
        if lr_scheduler is not None:
            if callable(lr_scheduler) and not hasattr(lr_scheduler, "step"):
                return lr_scheduler(self.optimizer)
            return lr_scheduler
        if settings.scheduler is None:
            return None
        try:
            return schedulers.build(settings.scheduler, self.optimizer)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    # ---- running the model ------------------------------------------------------------------------

    def _require_open(self):
        if self._zoe.closed:
            raise UsageError("this zoe.torch engine is closed")

    def __call__(self, *args, **kwargs):
        """model(*args, **kwargs), its parameters fetched from zoe module by module."""
        self._require_open()
        with self._runtime.compute(), self._saved.context(), self._runtime.forward_scope():
            try:
                return self.module(*args, **kwargs)
            except BaseException:
                self._runtime.abort_forward()
                raise

    forward = __call__

    def backward(self, loss, allreduce_gradients=True, release_loss=False, retain_graph=False, scale_wrt_gas=True):
        """Autograd from loss (times zoe's loss scale): the gradients go into zoe's buffers and are
        reduced module by module; closes the micro-batch. zoe averages the gradients over
        gradient_accumulation_steps (DeepSpeed's scale_wrt_gas): the loss is not divided here.
        Returns loss. allreduce_gradients and release_loss are DeepSpeed's, accepted and unused."""
        del allreduce_gradients, release_loss
        self._require_open()
        if not scale_wrt_gas:
            raise UsageError(
                "engine.backward(scale_wrt_gas=False): zoe always averages over gradient_accumulation_steps"
            )
        if not self._runtime.micro_batch_open:
            raise UsageError(
                "engine.backward(loss): no training forward ran through engine(...) since the last backward"
            )
        scale = self._zoe.loss_scale()
        if self.is_gradient_accumulation_boundary():
            # The scheduler stepped after the last step: param_groups hold this step's settings,
            # which the optimizer step inside backward then steps each shard with.
            try:
                self._zoe.announce_step(self._step_settings())
            except UsageError:
                pass  # settings the step refuses: it names them then; backward still closes the micro-batch
        with self._runtime.compute():
            try:
                (loss * scale if scale != 1.0 else loss).backward(retain_graph=retain_graph)
            finally:
                # Also after an autograd error: what it did reach is handed in and the micro-batch
                # closes, so the engine goes on.
                self._runtime.finish_backward()
                self._backwards += 1
        return loss

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self._batch.gradient_accumulation_steps == 0

    def step(self, lr_kwargs=None):
        """At the accumulation boundary: zoe's optimizer step with the optimizer's param_groups,
        then the lr scheduler's step. Elsewhere a no-op. Each call follows one engine.backward."""
        self._require_open()
        expected = self.micro_steps % self._batch.gradient_accumulation_steps + 1
        if self._backwards != expected:
            raise UsageError(
                f"engine.step() after {self._backwards} engine.backward() calls since the last optimizer step; "
                f"this is micro-step {expected} of gradient_accumulation_steps "
                f"{self._batch.gradient_accumulation_steps}: call engine.backward(loss) once before each "
                "engine.step()"
            )
        if self.is_gradient_accumulation_boundary():
            result = self.optimizer.step()
            # As DeepSpeed: a step skipped for an fp16 overflow does not advance the schedule.
            if self.lr_scheduler is not None and not result.skipped:
                self.lr_scheduler.step(**(lr_kwargs or {}))
        self.micro_steps += 1

    def _step_settings(self):
        """(lr, weight_decay, betas, eps) per zoe group, from the optimizer's param_groups as they are now."""
        return [
            (g["lr"], g["weight_decay"], g["betas"], g["eps"])  # zoe.Engine checks and converts, naming the group
            for g in self.optimizer.param_groups
        ]

    def _optimizer_step(self):
        result = self._zoe.step(groups=self._step_settings())
        self._last_step = result
        self._backwards = 0
        self.global_steps += 1
        self.skipped_steps += int(result.skipped)
        return result

    def train(self, mode=True):
        self.module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    # ---- what DeepSpeed's engine tells ------------------------------------------------------------

    @property
    def zoe_engine(self):
        """The zoe.Engine underneath (statistics(), traffic(), ...)."""
        return self._zoe

    @property
    def device(self):
        return self._device

    def gradient_accumulation_steps(self):
        return self._batch.gradient_accumulation_steps

    def train_batch_size(self):
        """DeepSpeed's train_batch_size (derived when not written; None when neither batch size is)."""
        return self._batch.train_batch_size or None

    def train_micro_batch_size_per_gpu(self):
        """DeepSpeed's train_micro_batch_size_per_gpu (derived when not written; None when neither
        batch size is)."""
        return self._batch.train_micro_batch_size_per_gpu or None

    def get_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def get_global_grad_norm(self):
        """The last step's gradient norm (averaged, unscaled, before clipping); None before any."""
        return None if self._last_step is None else self._last_step.grad_norm

    def was_step_applied(self):
        """False when the last optimizer step was skipped (an inf or NaN with fp16), or none ran."""
        return self._last_step is not None and not self._last_step.skipped

    def loss_scale(self):
        return self._zoe.loss_scale()

    def parameter_address(self, param):
        """zoe's address of `param`'s value (valid while its module is fetched)."""
        slot = self._layout.slot_of.get(param)
        if slot is None:
            raise UsageError("parameter_address: not a parameter of this engine's model")
        return self._zoe.parameter_address(slot.id)

    # ---- states ----------------------------------------------------------------------------------

    def state_dict(self):
        """module.state_dict()'s keys, parameters as fp32 CPU tensors of zoe's masters."""
        self._require_open()
        return state.state_dict(self.module, self._layout, self._zoe)

    def load_state_dict(self, state_dict, strict=True):
        """Sets the parameters (zoe's masters and working copies, not the Adam moments) and buffers
        from a state_dict keyed as the model's. Between steps only."""
        self._require_open()
        state.load_state_dict(self.module, self._layout, self._zoe, state_dict, strict=strict)

    def save_checkpoint(self, save_dir, tag=None, client_state=None, save_latest=True):
        """Saves every state under save_dir/tag (None: "step-<n>") and points save_dir/latest at
        it, crash-safe; client_state comes back from load_checkpoint. Between steps only."""
        self._require_open()
        if not save_latest:
            raise UsageError("save_checkpoint(save_latest=False): zoe always points `latest` at the new checkpoint")
        counters = {
            "global_steps": self.global_steps,
            "skipped_steps": self.skipped_steps,
            "micro_steps": self.micro_steps,
        }
        blob = state.client_blob(client_state or {}, self.optimizer, self.lr_scheduler, counters)
        os.makedirs(save_dir, exist_ok=True)
        if tag is None:  # zoe's own default, named here so the client blob can be found by it
            tag = f"step-{0 if self._last_step is None else self._last_step.optimizer_steps}"
        self._zoe.checkpoint_save(os.fspath(save_dir), str(tag), client=blob)
        return True

    def load_checkpoint(self, load_dir, tag=None, load_optimizer_states=True, load_lr_scheduler_states=True):
        """Loads load_dir/tag (None: the latest); returns (its path, the client_state saved)."""
        self._require_open()
        if not load_optimizer_states:
            raise UsageError("load_checkpoint(load_optimizer_states=False): zoe loads every state of its checkpoint")
        load_dir = os.fspath(load_dir)
        tag = state.latest_tag(load_dir) if tag is None else str(tag)
        path = os.path.join(load_dir, tag)
        self._zoe.checkpoint_load(load_dir, tag)
        saved = state.read_client_blob(self._zoe.checkpoint_client(), path)
        state.restore_groups(self.optimizer, saved["param_groups"], path)
        if load_lr_scheduler_states and self.lr_scheduler is not None and saved["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(saved["lr_scheduler"])
        counters = saved["counters"]
        self.global_steps = counters["global_steps"]
        self.skipped_steps = counters["skipped_steps"]
        self.micro_steps = counters["micro_steps"]
        self._backwards = 0
        return path, saved["client_state"]

    # ---- lifetime --------------------------------------------------------------------------------

    def close(self):
        """Destroys zoe's engine (idempotent), removing its swap files; the model's parameters stay
        empty. Engines never closed are closed at interpreter exit."""
        if self._zoe.closed:
            return
        self._runtime.detach()
        self.optimizer._apply = None
        self._stream.close()
        self._zoe.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getattr__(self, name):
        # As DeepSpeed's engine: what the engine lacks, the model may have (its own methods).
        module = self.__dict__.get("module")
        if module is None:
            raise AttributeError(name)
        return getattr(module, name)


def initialize(args=None, model=None, optimizer=None, model_parameters=None, training_data=None, lr_scheduler=None,
               distributed_port=None, mpu=None, dist_init_required=None, collate_fn=None, config=None,
               config_params=None, device=None, activation_min_bytes=DEFAULT_ACTIVATION_MIN_BYTES):
    """deepspeed.initialize for zoe: returns (engine, optimizer, dataloader, lr_scheduler).

    config (or config_params, or args.deepspeed_config): a DeepSpeed configuration, a dict or a
    JSON file's path. optimizer: a torch.optim.Adam / AdamW over the model's parameters (its param
    groups become zoe's) or a callable making one; model_parameters: parameters or group dicts;
    lr_scheduler: a scheduler over the returned optimizer or a callable making one (else the
    configuration's scheduler block). dataloader: a DataLoader of training_data when given.
    device: a zoe.Device to run on (None: the configuration's zoe.device). distributed_port, mpu
    and dist_init_required are accepted for DeepSpeed's signature and unused: zoe's ranks come
    from its launcher (mpirun, or torchrun's process group)."""
    del distributed_port, dist_init_required
    if mpu is not None:
        raise UsageError("initialize(mpu=...): zoe trains data-parallel only (no model-parallel unit)")
    if config is None:
        config = config_params if config_params is not None else getattr(args, "deepspeed_config", None)
    if config is None:
        raise UsageError("initialize needs a configuration: config=dict or path (or args.deepspeed_config)")
    if model is None:
        raise UsageError("initialize needs model=")
    engine = Engine(model, config, optimizer=optimizer, model_parameters=model_parameters, lr_scheduler=lr_scheduler,
                    device=device, activation_min_bytes=activation_min_bytes)
    loader = None
    if training_data is not None:
        loader = _data_loader(engine, training_data, collate_fn)
    return engine, engine.optimizer, loader, engine.lr_scheduler


def _data_loader(engine, training_data, collate_fn):
    # As DeepSpeed's: micro-batches of train_micro_batch_size_per_gpu, each rank its share, shuffled
    # (1 when the configuration writes neither batch size, which DeepSpeed would refuse).
    batch = engine.train_micro_batch_size_per_gpu() or 1
    ranks = engine.zoe_engine.ranks()
    sampler = torch.utils.data.DistributedSampler(training_data, num_replicas=ranks.world_size, rank=ranks.rank)
    return torch.utils.data.DataLoader(training_data, batch_size=batch, sampler=sampler, collate_fn=collate_fn)

