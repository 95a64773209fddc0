"""Handles close exactly once: close(), `with`, and at interpreter exit in dependency order."""

import os
import subprocess
import sys
import textwrap

import pytest

import zoe

from test_core_train import build_mlp

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_a_device_in_use_refuses_to_close_and_stays_usable():
    device = zoe.Device("host", budget_bytes=16 << 20)
    model = build_mlp()
    engine = zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}}, device=device)
    with pytest.raises(zoe.UsageError):
        device.close()
    assert not device.closed and device.kind == "host"
    pointer = device.allocate(1024)
    assert device.memory()[0] >= 1024
    device.free(pointer, 1024)
    engine.close()
    device.close()
    device.close()
    model.close()
    assert device.closed and engine.closed and model.closed


def test_an_engine_with_a_stream_of_its_own_device_open_refuses_to_close():
    with build_mlp() as model:
        engine = zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}})
        stream = zoe.Stream(engine.device)
        assert stream.native is None  # the host device has no native stream
        with pytest.raises(zoe.UsageError):
            engine.close()
        assert not engine.closed
        stream.close()
        engine.close()


def run_with_an_engine(swap, body):
    """Runs a Python process that opens `engine` (build_mlp() swapping to `swap`), then `body`
    (which may use os, sys, np, zoe, build_mlp, nvme_config and SWAP, the folder as a str)."""
    swap.mkdir()
    code = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {TESTS!r})
        import numpy as np
        import zoe
        from test_core_train import build_mlp, nvme_config
        SWAP = {str(swap)!r}
        engine = zoe.Engine(build_mlp(), nvme_config(SWAP))
        """
    ) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


def test_exit_without_close_removes_the_swap_files(tmp_path):
    """A process that leaves an engine (and a stream of the engine's own device) open: at exit the
    stream closes before the engine, whose destroy removes its swap files."""
    swap = tmp_path / "swap"
    result = run_with_an_engine(
        swap,
        """
        stream = zoe.Stream(engine.device)
        device = zoe.Device("host", budget_bytes=16 << 20)
        other = zoe.Engine(build_mlp(), nvme_config(SWAP), device=device)
        print(len(os.listdir(SWAP)))
        """,
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) >= 1, "the engines made no swap files"
    assert "at exit" not in result.stderr, result.stderr
    assert list(swap.iterdir()) == []


def test_a_forked_child_that_exits_leaves_the_parents_swap_files(tmp_path):
    """A child forked while an engine is open runs its atexit handlers at sys.exit: they must not
    destroy the parent's engine (its swap files)."""
    swap = tmp_path / "swap"
    result = run_with_an_engine(
        swap,
        """
        before = engine.read_state(0)
        files = sorted(os.listdir(SWAP))
        assert files
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
        assert sorted(os.listdir(SWAP)) == files
        np.testing.assert_array_equal(engine.read_state(0), before)
        print("parent ok")
        """,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["parent", "ok"]
    assert list(swap.iterdir()) == []
