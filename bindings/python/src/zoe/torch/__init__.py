"""zoe.torch: zoe as the offload backend of a PyTorch training loop, with deepspeed.initialize's shape.

    engine, optimizer, _, _ = zoe.torch.initialize(model=model, config=cfg)
    loss = loss_fn(engine(x), y)
    engine.backward(loss)
    engine.step()

engine.py (initialize, the engine), layout.py (torch modules -> zoe modules), hooks.py (fetch,
release, gradients), saved_tensors.py (what autograd keeps for backward), optimizer.py (param
groups), state.py (state_dict, checkpoints), tensors.py (zero-copy tensors over zoe's memory),
config.py (the keys zoe.torch reads). zoe.torch.Init: init_context.py.

What a DeepSpeed script meets that differs:
- param.grad is zoe's buffer only while autograd accumulates into it; after engine.backward the
  gradients are in zoe (engine.zoe_engine.read_state(id, "gradient")), not on the parameters.
- A parameter is fetched while a module registering it runs, and when it is read in another
  module's forward (x @ self.emb.weight.t() in a parent: DeepSpeed's external parameter, detected
  when read, with no register_external_parameter needed), held until that forward ends: count it
  in stage3_max_live_parameters beside the modules running meanwhile. Outside the engine's forward
  it is an empty tensor.
- A parent's own parameters stay fetched while its children run: size stage3_max_live_parameters
  for the largest such chain (zoe's default is far larger).
- Adam and AdamW only; each param group's lr, weight_decay, betas and eps are read at every step.
"""

from .engine import Engine, footprint_plan, initialize

__all__ = ["Engine", "Init", "footprint_plan", "initialize"]


def __getattr__(name):
    # Init lives in its own module (it patches torch's parameter creation): imported when asked for.
    if name == "Init":
        from .init_context import Init

        return Init
    raise AttributeError(f"module 'zoe.torch' has no attribute {name!r}")
