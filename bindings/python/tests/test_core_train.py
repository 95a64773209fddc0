"""A two-layer MLP trained through zoe.Engine on the host device, its parameters and Adam states on
NVMe (a tmp folder), against the same AdamW steps in numpy."""

import ctypes

import numpy as np
import pytest

import zoe

IN, HIDDEN, OUT, ROWS = 6, 8, 3, 5
MICRO_BATCHES, STEPS = 2, 3
LR, BETAS, EPS, WEIGHT_DECAY = 0.01, (0.9, 0.999), 1e-8, 0.01


def nvme_config(swap_dir, accumulation=MICRO_BATCHES):
    swap = str(swap_dir)
    return {
        "gradient_accumulation_steps": accumulation,
        "gradient_clipping": 0.0,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY},
        },
        "zero_optimization": {
            "stage": 3,
            "offload_param": {
                "device": "nvme",
                "nvme_path": swap,
                "buffer_count": 4,
                "buffer_size": 65536,
                "max_in_cpu": 0,
            },
            "offload_optimizer": {"device": "nvme", "nvme_path": swap, "buffer_count": 4},
        },
        "aio": {"block_size": 65536, "queue_depth": 8},
        "zoe": {"device": {"kind": "host"}},
    }


def build_mlp():
    """layer0 (w0 [HIDDEN, IN], b0), layer1 (w1 [OUT, HIDDEN], b1); ids 0..3 in that order."""
    model = zoe.Model()
    for layer, (rows, cols) in enumerate([(HIDDEN, IN), (OUT, HIDDEN)]):
        module = model.add_module(f"layer{layer}")
        model.add_parameter(module, f"w{layer}", (rows, cols), init="uniform", scale=0.4, seed=10 + layer)
        model.add_parameter(module, f"b{layer}", (rows,), data=np.linspace(-0.1, 0.1, rows))
    return model


def host_view(address, shape):
    """The fp32 host memory at `address` (the host device's memory is host memory) as an array."""
    count = int(np.prod(shape))
    return np.ctypeslib.as_array((ctypes.c_float * count).from_address(address)).reshape(shape)


def forward(params, x):
    w0, b0, w1, b1 = params
    pre = x @ w0.T + b0
    hidden = np.maximum(pre, 0)
    return pre, hidden, hidden @ w1.T + b1


def gradients(params, x, target):
    """d(loss)/d(each parameter) of loss = sum((y - target)^2) / (2 ROWS)."""
    w0, _, w1, _ = params
    pre, hidden, y = forward(params, x)
    dy = (y - target) / ROWS
    dhidden = (dy @ w1) * (pre > 0)
    return [dhidden.T @ x, dhidden.sum(0), dy.T @ hidden, dy.sum(0)]


def batches(seed):
    rng = np.random.default_rng(seed)
    return [
        [(rng.standard_normal((ROWS, IN)), rng.standard_normal((ROWS, OUT))) for _ in range(MICRO_BATCHES)]
        for _ in range(STEPS)
    ]


def train_step_through_zoe(engine, stream, micro_batches):
    for x, target in micro_batches:
        engine.begin_micro_batch()
        weights = []
        for module in (0, 1):
            engine.fetch(module, "forward", stream)
            stream.synchronize()
            weights += [
                host_view(engine.parameter_address(p), engine.parameters[p].shape).copy()
                for p in engine.module_parameters(module)
            ]
            engine.release(module, stream)
        grads = gradients(weights, x, target)
        for module in (1, 0):
            engine.fetch(module, "backward", stream)
            buffers = engine.module_gradients(module, stream)
            stream.synchronize()  # the buffers' zero-fill is queued on the stream
            for p, buffer in zip(engine.module_parameters(module), buffers):
                host_view(buffer, engine.parameters[p].shape)[...] = grads[p]
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
        engine.end_micro_batch()
    return engine.step()


class AdamWReference:
    """torch.optim.AdamW's step in float32, as zoe.h's zoe_step_groups states it."""

    def __init__(self, params):
        self.params = [p.astype(np.float32) for p in params]
        self.exp_avg = [np.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [np.zeros_like(p) for p in self.params]
        self.t = 0

    def step(self, grads):
        self.t += 1
        b1, b2 = np.float32(BETAS[0]), np.float32(BETAS[1])
        lr, wd, eps = np.float32(LR), np.float32(WEIGHT_DECAY), np.float32(EPS)
        for i, g in enumerate(grads):
            g = g.astype(np.float32)
            p = self.params[i]
            p -= lr * wd * p
            self.exp_avg[i] = b1 * self.exp_avg[i] + (1 - b1) * g
            self.exp_avg_sq[i] = b2 * self.exp_avg_sq[i] + (1 - b2) * g * g
            m_hat = self.exp_avg[i] / (1 - b1**self.t)
            v_hat = self.exp_avg_sq[i] / (1 - b2**self.t)
            p -= lr * m_hat / (np.sqrt(v_hat) + eps)


def test_three_adamw_steps_on_nvme_match_numpy(tmp_path):
    swap = tmp_path / "swap"
    swap.mkdir()
    data = batches(seed=3)
    with zoe.Device("host", budget_bytes=64 << 20) as device:
        model = build_mlp()
        with zoe.Engine(model, nvme_config(swap), device=device) as engine, zoe.Stream(device) as stream:
            model.close()  # the engine keeps what it needs of the model
            assert any(swap.rglob("*")), "the states should be swapped to the nvme folder"
            reference = AdamWReference([engine.read_state(p) for p in range(4)])
            expected_initial = zoe.initializer_fill("uniform", 0.4, 10, 0, HIDDEN * IN).reshape(HIDDEN, IN)
            np.testing.assert_array_equal(reference.params[0], expected_initial)
            np.testing.assert_array_equal(reference.params[1], np.linspace(-0.1, 0.1, HIDDEN).astype(np.float32))

            for step, micro_batches in enumerate(data, start=1):
                result = train_step_through_zoe(engine, stream, micro_batches)
                per_batch = [gradients(reference.params, x, t) for x, t in micro_batches]
                averaged = [sum(g) / MICRO_BATCHES for g in zip(*per_batch)]
                reference.step(averaged)
                assert result.optimizer_steps == step
                assert not result.skipped
                assert result.clip_coefficient == 1.0
                norm = np.sqrt(sum(float(np.sum(np.square(g, dtype=np.float64))) for g in averaged))
                assert result.grad_norm == pytest.approx(norm, rel=1e-5)

            for p in range(4):
                np.testing.assert_allclose(engine.read_state(p), reference.params[p], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(engine.read_state(p, "exp_avg"), reference.exp_avg[p], rtol=1e-5, atol=1e-7)
                np.testing.assert_allclose(
                    engine.read_state(p, "exp_avg_sq"), reference.exp_avg_sq[p], rtol=1e-5, atol=1e-9
                )
            assert engine.statistics()["nvme_read_bytes"] > 0
        assert not any(swap.rglob("*")), "closing the engine should remove its swap files"
