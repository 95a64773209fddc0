"""Save, SIGKILL, resume: a zoe.torch run killed at a random moment after its checkpoints began and
resumed from the latest one continues bit for bit as a run never interrupted."""

import json
import os
import random
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import zoe  # noqa: E402

_TESTS = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.dirname(os.path.dirname(os.path.abspath(zoe.__file__)))
_STEPS = 12
_SAVE_FROM = 4


def _start(work):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_SRC, _TESTS, os.environ.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.Popen(
        [sys.executable, os.path.join(_TESTS, "extras_resume_train.py"), str(work), str(_STEPS), str(_SAVE_FROM)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _events(lines):
    return [json.loads(line) for line in lines if line.startswith("{")]


def _run_to_end(work):
    process = _start(work)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    return _events(out.splitlines())


def _losses(events):
    return {e["step"]: e["loss"] for e in events if "step" in e}


def test_a_run_killed_after_its_checkpoints_resumes_bit_for_bit(tmp_path):
    seed = int(os.environ.get("ZOE_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    kill_after = rng.randrange(_SAVE_FROM + 1, _STEPS - 2)  # a step whose line is seen, then a random moment
    delay = rng.uniform(0.0, 0.05)
    why = f"(seed {seed}: killed {delay:.3f} s after step {kill_after}'s line)"

    reference = _losses(_run_to_end(tmp_path / "reference"))
    assert sorted(reference) == list(range(1, _STEPS + 1))

    killed_work = tmp_path / "killed"
    process = _start(killed_work)
    seen = []
    for line in process.stdout:
        seen.append(line)
        event = json.loads(line)
        if event.get("step") == kill_after:
            time.sleep(delay)
            process.kill()
            break
    process.wait(timeout=60)
    process.stdout.close()
    process.stderr.close()
    # 0: the run ran ahead of the pipe to its end before the kill came; the resume then has nothing
    # to run and the final state is still compared.
    assert process.returncode in (-9, 0), f"the run failed {why}"
    before = _events(seen)
    saved = [e["saved"] for e in before if "saved" in e]
    assert saved, f"no checkpoint completed before the kill {why}"

    resumed = _run_to_end(killed_work)
    resumed_losses = _losses(resumed)
    # No step left to run: the killed run saved the last one (its line still in the pipe).
    first = min(resumed_losses, default=_STEPS + 1)
    # The latest complete checkpoint is the last one announced, or one finished after it whose line
    # was still in the pipe when the kill came (the child runs ahead of the lines read here, so no
    # upper bound follows from the step the kill came after); never an older one.
    assert saved[-1] + 1 <= first <= _STEPS + 1, f"resumed at step {first} after saves {saved} {why}"
    assert sorted(resumed_losses) == list(range(first, _STEPS + 1))
    for step, loss in _losses(before).items():
        assert loss == reference[step], f"step {step} before the kill {why}"
    for step, loss in resumed_losses.items():
        assert loss == reference[step], f"step {step} after resuming: {loss!r} against {reference[step]!r} {why}"

    want = torch.load(tmp_path / "reference" / "final.pt")
    got = torch.load(killed_work / "final.pt")
    assert list(got) == list(want)
    for name, value in want.items():
        assert torch.equal(got[name], value), f"{name} {why}"
