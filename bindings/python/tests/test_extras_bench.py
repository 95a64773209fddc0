"""python -m zoe.torch.bench at a tiny size: both sides run, and zoe's side counts what it adds to
the compute (the hooks' time, the tied embedding's gradient copied into zoe's buffer)."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import zoe  # noqa: E402
from zoe.torch import bench  # noqa: E402
from zoe.torch._gpt import GPT2  # noqa: E402

_SRC = os.path.dirname(os.path.dirname(os.path.abspath(zoe.__file__)))
_VOCAB, _WIDTH = 96, 16


def test_largest_module_is_the_tied_embedding_or_a_module_own_parameters():
    model = GPT2(vocab=_VOCAB, context=8, width=_WIDTH, heads=2, layers=1)
    # wte.weight (also lm_head's) is a zoe module of its own: 96 x 16 beats the MLP's 16 x 64 + 64.
    assert bench._largest_module(model) == _VOCAB * _WIDTH
    wide = GPT2(vocab=8, context=8, width=_WIDTH, heads=2, layers=1)
    assert bench._largest_module(wide) == _WIDTH * 4 * _WIDTH + 4 * _WIDTH  # mlp's first Linear, weight and bias


def test_bench_runs_both_sides_and_counts_zoe_overhead(tmp_path):
    out = tmp_path / "bench.json"
    folder = tmp_path / "swap"
    folder.mkdir()
    command = [sys.executable, "-m", "zoe.torch.bench", "--layers", "1", "--hidden", str(_WIDTH), "--heads", "2",
               "--vocab", str(_VOCAB), "--seq", "8", "--batch", "2", "--steps", "2", "--warmup", "1", "--rounds", "1",
               "--threads", "1", "--folder", str(folder), "--json", str(out)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_SRC, os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "ratio: zoe step / max(torch step, zoe I/O alone)" in done.stdout
    result = json.loads(out.read_text())
    runs = {run["side"]: run for run in result["runs"]}
    assert set(runs) == {"torch", "zoe"}
    zoe_run, torch_run = runs["zoe"], runs["torch"]
    assert len(zoe_run["steps"]) == len(torch_run["steps"]) == 2
    for zoe_step, torch_step in zip(zoe_run["steps"], torch_run["steps"]):
        assert zoe_step["loss"] == pytest.approx(torch_step["loss"], rel=1e-4)
        assert 0 < zoe_step["hook_s"] < zoe_step["step_s"]
        assert zoe_step["cpu_s"] > 0
        # The tied embedding's gradient, summed by autograd over its two uses, copied in once a step.
        assert zoe_step["gradient_copy_bytes"] == _VOCAB * _WIDTH * 4
    assert zoe_run["nvme_read_bytes_per_step"] > 0 and zoe_run["nvme_write_bytes_per_step"] > 0
    assert zoe_run["zoe_memory_peak_bytes"] > 0
    assert not list(folder.iterdir())  # zoe removed its swap files
