"""Data-parallel zoe.torch from the launch line: `mpirun -n 2` (zoe's mpi backend) and a torchrun
launch (torch.distributed over gloo, through zoe's host communicator) each train as one rank does
with the same global batch."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

pytest.importorskip("torch")

import zoe  # noqa: E402

_TESTS = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.dirname(os.path.dirname(os.path.abspath(zoe.__file__)))
_SCRIPT = os.path.join(_TESTS, "extras_ranks_train.py")
_STEPS = 5
# Two ranks sum their gradients in another order than one rank's batch does: float rounding only.
_RTOL = 1e-5

_LAUNCH_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_KEYS and not k.startswith(("OMPI_", "PMIX_"))}
    env["PYTHONPATH"] = os.pathsep.join([_SRC, _TESTS, os.environ.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra)
    return env


def _read(out):
    with open(out, encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "out.json"
    subprocess.run([sys.executable, _SCRIPT, str(out), str(_STEPS)], env=_env(), check=True, timeout=300)
    result = _read(out)
    assert result["world_size"] == 1
    return result


def _assert_same_training(got, want):
    assert len(got["losses"]) == len(want["losses"]) == _STEPS
    for step, (a, b) in enumerate(zip(got["losses"], want["losses"])):
        assert abs(a - b) <= _RTOL * abs(b), f"step {step}: {got['world_size']} ranks {a!r}, one rank {b!r}"
    assert list(got["state"]) == list(want["state"])
    for name in want["state"]:
        a, b = _flat(got["state"][name]), _flat(want["state"][name])
        assert len(a) == len(b), name
        worst = max(abs(x - y) - _RTOL * abs(y) for x, y in zip(a, b))
        assert worst <= 1e-7, f"{name}: off by {worst:.3g} beyond the tolerance"


def _flat(value):
    if isinstance(value, list):
        return [x for item in value for x in _flat(item)]
    return [value]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="mpirun is not installed")
def test_mpirun_two_ranks_equal_one_rank(tmp_path, one_rank):
    out = tmp_path / "out.json"
    command = ["mpirun", "-n", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    for key in ("PYTHONPATH", "OMP_NUM_THREADS", "ZOE_LIBRARY"):
        if key in _env():
            command += ["-x", key]
    done = subprocess.run(command + [sys.executable, _SCRIPT, str(out), str(_STEPS)], env=_env(), timeout=300,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    result = _read(out)
    assert result["world_size"] == 2
    _assert_same_training(result, one_rank)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# What torchrun --nproc_per_node 2 sets. Either the script makes no process group of its own, so
# zoe.torch.initialize makes it (gloo on the CPU) as deepspeed.init_distributed would, or the
# script makes it (init_process_group("gloo")) and zoe's collectives run on that group.
@pytest.mark.parametrize("group_by", ["initialize", "script"])
def test_torchrun_two_ranks_over_gloo_equal_one_rank(tmp_path, one_rank, group_by):
    out = tmp_path / "out.json"
    port = str(_free_port())
    extra = ["script-group"] if group_by == "script" else []
    processes = [
        subprocess.Popen(
            [sys.executable, _SCRIPT, str(out), str(_STEPS)] + extra,
            env=_env(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(outputs)
    result = _read(out)
    assert result["world_size"] == 2
    _assert_same_training(result, one_rank)
