"""An engine's end: a with-block or close() removes its swap files at once; one never closed is
torn down at interpreter exit, leaving nothing behind."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import zoe
import zoe.torch
from models import MLP, regression_batches
from torch_training import mse, offload_config, with_budget

torch.set_num_threads(1)


def test_with_block_removes_the_swap_files_and_refuses_later_use(tmp_path):
    model = MLP(inputs=16, hidden=32, outputs=8, layers=3)
    engine, _, _, _ = zoe.torch.initialize(model=model, config=with_budget(model, offload_config(tmp_path, model)))
    (x, y), = regression_batches(1)
    with engine:
        engine.backward(mse(engine(x), y))
        engine.step()
        assert os.listdir(tmp_path)
    assert os.listdir(tmp_path) == []
    with pytest.raises(zoe.UsageError, match="engine is closed"):
        engine(x)
    engine.close()  # idempotent


def test_engine_never_closed_is_torn_down_at_exit(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, torch
        import zoe.torch
        from models import MLP, regression_batches
        from torch_training import mse, offload_config, with_budget
        model = MLP(inputs=16, hidden=32, outputs=8, layers=3)
        config = with_budget(model, offload_config({str(tmp_path)!r}, model))
        engine, _, _, _ = zoe.torch.initialize(model=model, config=config)
        (x, y), = regression_batches(1)
        engine.backward(mse(engine(x), y))
        engine.step()
        print(len(__import__("os").listdir({str(tmp_path)!r})))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "1"  # the swap folder existed while it ran
    assert os.listdir(tmp_path) == []
