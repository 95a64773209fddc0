"""zoe.torch: zoe as the offload backend of a PyTorch training loop, with deepspeed.initialize's shape.

    engine, optimizer, _, _ = zoe.torch.initialize(model=model, config=cfg)
    loss = loss_fn(engine(x), y)
    engine.backward(loss)
    engine.step()

engine.py (initialize, the engine), layout.py (torch modules -> zoe modules), hooks.py (fetch,
release, gradients), saved_tensors.py (what autograd keeps for backward), optimizer.py (param
groups), state.py (state_dict, checkpoints), tensors.py (zero-copy tensors over zoe's memory),
config.py (the keys zoe.torch reads). zoe.torch.Init: init_context.py.
"""

from .engine import Engine, footprint_plan, initialize

__all__ = ["Engine", "Init", "footprint_plan", "initialize"]


def __getattr__(name):
    # Init lives in its own module (it patches torch's parameter creation): imported when asked for.
    if name == "Init":
        from .init_context import Init

        return Init
    raise AttributeError(f"module 'zoe.torch' has no attribute {name!r}")
