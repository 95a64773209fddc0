"""zoe's collectives over torch.distributed (zoe.torch.process_group.host_comm_for): two processes
with a gloo group (init_method file://) train a tiny zoe model 3 steps, each on its half of the
global batch, and match one process trained on the whole batch bit for bit (two ranks add in any
order alike, and each rank's gradient is half of the one rank's pairwise sum: a power-of-two
scale, exact). Also: a callback's exception becomes a zoe status and message, never a Python
exception unwinding into C; host_comm_for refuses an uninitialized torch.distributed.

Run as a script, this file is one rank: python test_host_comm.py RANK WORLD INIT_FILE OUT_FILE."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import zoe  # noqa: E402
from zoe._host_comm import MESSAGE_CAPACITY, HostComm  # noqa: E402

from test_core_train import host_view  # noqa: E402

IN, OUT, BATCH, STEPS = 4, 3, 4, 3
CONFIG = {
    "zero_optimization": {"stage": 3},
    "gradient_clipping": 0,
    "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
    "zoe": {"device": {"kind": "host", "budget_bytes": 64 << 20}},
}


def samples():
    rng = np.random.default_rng(5)
    return rng.standard_normal((BATCH, IN)).astype(np.float32), rng.standard_normal((BATCH, OUT)).astype(np.float32)


def mean_gradient(w, b, x, t):
    """The mean over the rows of each row's gradient of 0.5 |w x + b - t|^2, the rows added in the
    pairwise tree ((g0 + g1) + (g2 + g3)), in float32."""
    per_row = []
    for xi, ti in zip(x, t):
        e = (w @ xi + b - ti).astype(np.float32)
        per_row.append([np.outer(e, xi).astype(np.float32), e])
    while len(per_row) > 1:
        per_row = [[a[0] + c[0], a[1] + c[1]] for a, c in zip(per_row[0::2], per_row[1::2])]
    scale = np.float32(1.0 / len(x))
    return per_row[0][0] * scale, per_row[0][1] * scale


def train(rank, world, host_comm=None):
    """3 steps on rank `rank`'s share of the batch; the parameters and exp_avg_sq after them."""
    x, t = samples()
    share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    model = zoe.Model()
    module = model.add_module("linear")
    w = model.add_parameter(module, "w", (OUT, IN), init="uniform", scale=0.5, seed=7)
    b = model.add_parameter(module, "b", (OUT,), init="uniform", scale=0.5, seed=8)
    with zoe.Engine(model, CONFIG, host_comm=host_comm) as engine:
        stream = zoe.Stream(engine.device)
        for _ in range(STEPS):
            engine.begin_micro_batch()
            engine.fetch(module, "backward", stream)
            buffers = engine.module_gradients(module, stream)
            stream.synchronize()
            grad_w, grad_b = mean_gradient(
                host_view(engine.parameter_address(w), (OUT, IN)), host_view(engine.parameter_address(b), (OUT,)),
                x[share], t[share],
            )
            host_view(buffers[0], (OUT, IN))[...] = grad_w
            host_view(buffers[1], (OUT,))[...] = grad_b
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
            engine.end_micro_batch()
            assert not engine.step().skipped
        result = {
            "w": engine.read_state(w),
            "b": engine.read_state(b),
            "w_sq": engine.read_state(w, "exp_avg_sq"),
            "ranks": np.array([engine.ranks().rank, engine.ranks().world_size]),
            "sent": np.array([engine.traffic().intra_node_bytes]),
        }
        stream.close()
    model.close()
    return result


def run_rank(rank, world, init_file, out_file):
    import torch.distributed as dist

    from zoe.torch.process_group import host_comm_for

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        np.savez(out_file, **train(rank, world, host_comm_for()))
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_train_bit_for_bit_like_one_rank_with_the_global_batch(tmp_path):
    torch.set_num_threads(1)
    one = train(0, 1)
    init = tmp_path / "init"
    outs = [tmp_path / f"rank{r}.npz" for r in range(2)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, str(r), "2", str(init), str(outs[r])],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    logs = [p.communicate(timeout=240)[0] for p in ranks]
    for r, p in enumerate(ranks):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r]}"
    for r in range(2):
        two = np.load(outs[r])
        assert list(two["ranks"]) == [r, 2]
        assert two["sent"][0] > 0
        for key in ("w", "b", "w_sq"):
            np.testing.assert_array_equal(two[key], one[key], err_msg=f"rank {r}: {key}")
    # The steps had gradients: the equality above is not of two untouched copies.
    assert np.count_nonzero(one["w_sq"]) == OUT * IN


class Refusing:
    """Collectives whose all_gather raises (and create_group hands back a name)."""

    def create_group(self, ranks):
        return f"group of {ranks}"

    def all_gather(self, group, send, recv, nbytes, stream):
        raise ValueError(f"{group}: no gather today ({nbytes} bytes)")


def test_a_callback_exception_becomes_a_status_and_a_message_not_an_unwinding():
    host_comm = HostComm(Refusing(), rank=0, world_size=2)
    comm = host_comm._as_parameter_
    message = ctypes.create_string_buffer(MESSAGE_CAPACITY)
    ranks = (ctypes.c_uint32 * 2)(0, 1)
    group = ctypes.c_void_p()
    assert comm.create_group(None, ranks, 2, ctypes.byref(group), message, MESSAGE_CAPACITY) == 0
    assert group.value == 1
    status = comm.all_gather(None, group, None, None, 8, None, message, MESSAGE_CAPACITY)
    assert status == zoe.UsageError.status
    assert message.value.decode() == "ValueError: group of [0, 1]: no gather today (8 bytes)"
    # A method the object lacks is a failure too, reported the same way.
    assert comm.barrier(None, group, message, MESSAGE_CAPACITY) == zoe.CommError.status
    assert "AttributeError" in message.value.decode() and "barrier" in message.value.decode()


def test_host_comm_for_refuses_an_uninitialized_torch_distributed():
    from zoe.torch.process_group import host_comm_for

    if torch.distributed.is_initialized():
        pytest.skip("torch.distributed is initialized in this process")
    with pytest.raises(zoe.UsageError, match="init_process_group"):
        host_comm_for()


if __name__ == "__main__":
    run_rank(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
