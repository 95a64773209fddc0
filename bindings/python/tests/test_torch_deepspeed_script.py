"""A DeepSpeed script with deepspeed.initialize replaced by zoe.torch.initialize and nothing else
changed: its JSON config file (DeepSpeed keys zoe does not read, no zoe block) passed by path, its
model's forward taking keyword arguments and returning a tuple, a BatchNorm whose running
statistics torch updates in forward (buffers stay torch's), and DeepSpeed's loop. It trains as
torch.optim.AdamW does."""

import copy
import json

import torch
import torch.nn.functional as F
from torch import nn

import zoe.torch
from torch_training import BETAS, EPS, assert_losses_close

torch.set_num_threads(1)

STEPS, GAS = 10, 2


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        # No bias before the BatchNorm: its gradient would be zero but for rounding, and Adam
        # would step that rounding noise to +-lr, differently in any two implementations.
        self.fc1 = nn.Linear(16, 32, bias=False)
        self.bn = nn.BatchNorm1d(32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x, scale=1.0):
        hidden = torch.tanh(self.bn(self.fc1(x)))
        return self.fc2(hidden) * scale, {"hidden": hidden}


def ds_config(swap):
    return {
        "train_batch_size": 16,
        "train_micro_batch_size_per_gpu": 8,
        "gradient_accumulation_steps": GAS,
        "steps_per_print": 5,
        "wall_clock_breakdown": False,
        "gradient_clipping": 1.0,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "betas": list(BETAS), "eps": EPS, "weight_decay": 0.01}},
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "nvme", "nvme_path": str(swap)},
            "offload_optimizer": {"device": "nvme", "nvme_path": str(swap)},
        },
    }


def batches():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 16, generator=g), torch.randn(8, 8, generator=g)) for _ in range(STEPS * GAS)]


def test_a_deepspeed_script_runs_with_only_initialize_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOE_DEVICE", "host")  # the launch's choice, not the config's: the file stays DeepSpeed's
    torch.manual_seed(0)
    model = Net()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2, betas=BETAS, eps=EPS, weight_decay=0.01)
    want = []
    for i, (x, y) in enumerate(batches()):
        out, _ = reference(x, scale=0.5)
        loss = F.mse_loss(out, y)
        (loss / GAS).backward()
        want.append(loss.item())
        if i % GAS == GAS - 1:
            torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()

    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(ds_config(tmp_path)))
    engine, _, _, _ = zoe.torch.initialize(model=model, model_parameters=model.parameters(), config=str(path))
    got = []
    with engine:
        for x, y in batches():
            out, extra = engine(x.to(engine.device), scale=0.5)
            assert set(extra) == {"hidden"} and extra["hidden"].shape == (8, 32)
            loss = F.mse_loss(out, y.to(engine.device))
            engine.backward(loss)
            engine.step()
            got.append(loss.item())
        assert engine.global_steps == STEPS
        state = engine.state_dict()
    assert_losses_close(got, want, rtol=1e-5)
    want_state = reference.state_dict()
    assert list(state) == list(want_state)
    assert want_state["bn.num_batches_tracked"].item() == STEPS * GAS
    for key, value in want_state.items():
        torch.testing.assert_close(state[key].cpu(), value, rtol=1e-5, atol=1e-6, msg=lambda m, key=key: f"{key}: {m}")
