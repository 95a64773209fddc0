"""DeepSpeed's scheduler block: the lrs zoe.torch.schedulers sets, against tables derived by hand
from DeepSpeed's documented formulas (not from the module under test)."""

import math
import warnings

import pytest

torch = pytest.importorskip("torch")

from zoe.torch import schedulers  # noqa: E402


def _optimizer(lrs=(1e-3, 1e-3)):
    """An AdamW with one parameter group per lr (a scheduler touches nothing but param_groups)."""
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs]
    return torch.optim.AdamW(groups, lr=lrs[0])


def _lrs(optimizer):
    return [group["lr"] for group in optimizer.param_groups]


def _walk(block, steps, lrs=(1e-3, 1e-3)):
    """The first group's lr before the first step, then after each of `steps` steps."""
    optimizer = _optimizer(lrs)
    schedule = schedulers.build(block, optimizer)
    seen = [_lrs(optimizer)[0]]
    for _ in range(steps):
        schedule.step()
        seen.append(_lrs(optimizer)[0])
    return seen


def test_warmup_lr_linear_rises_then_holds():
    block = {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 8.0, "warmup_num_steps": 4, "warmup_type": "linear"},
    }
    # Before any step: min; iteration i < 4: 8 * i / 4; afterwards 8.
    assert _walk(block, 6) == pytest.approx([0, 0, 2, 4, 6, 8, 8], abs=1e-12)


def test_warmup_lr_log_follows_log_of_the_iteration():
    block = {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": 1.0, "warmup_max_lr": 3.0, "warmup_num_steps": 4},
    }
    # log warm-up: min + (max - min) * ln(i + 1) / ln(4): i = 1 gives ln 2 / ln 4 = 1/2, i = 3 gives 1.
    expected = [1.0, 1.0, 2.0, 1.0 + 2.0 * math.log(3) / math.log(4), 3.0, 3.0]
    assert _walk(block, 5) == pytest.approx(expected, rel=1e-12)


def test_warmup_lr_takes_a_value_per_group():
    optimizer = _optimizer((1.0, 1.0))
    block = {
        "type": "WarmupLR",
        "params": {"warmup_min_lr": [0.0, 1.0], "warmup_max_lr": [4.0, 9.0], "warmup_num_steps": 2,
                   "warmup_type": "linear"},
    }
    schedule = schedulers.build(block, optimizer)
    schedule.step()
    schedule.step()  # iteration 1 of 2: half way
    assert _lrs(optimizer) == pytest.approx([2.0, 5.0])
    assert schedule.get_last_lr() == pytest.approx([2.0, 5.0])


def test_warmup_decay_lr_decays_linearly_to_zero_at_total_steps():
    block = {
        "type": "WarmupDecayLR",
        "params": {"total_num_steps": 10, "warmup_min_lr": 0.0, "warmup_max_lr": 6.0, "warmup_num_steps": 4,
                   "warmup_type": "linear"},
    }
    # Warm-up 0, 1.5, 3, 4.5 at iterations 0..3; then 6 * (10 - i) / 6 = 10 - i; 0 from 10 on.
    expected = [0, 0, 1.5, 3, 4.5, 6, 5, 4, 3, 2, 1, 0, 0]
    assert _walk(block, 12) == pytest.approx(expected, abs=1e-12)


def test_warmup_cosine_lr_scales_each_groups_own_lr():
    block = {
        "type": "WarmupCosineLR",
        "params": {"total_num_steps": 8, "warmup_min_ratio": 0.2, "warmup_num_steps": 2, "cos_min_ratio": 0.1,
                   "warmup_type": "linear"},
    }
    optimizer = _optimizer((1.0, 10.0))
    schedule = schedulers.build(block, optimizer)
    # DeepSpeed sets the first group alone to 0 before the first step; the second keeps its lr.
    assert _lrs(optimizer) == [0.0, 10.0]
    ratios = []
    for _ in range(9):
        schedule.step()
        first, second = _lrs(optimizer)
        assert second == pytest.approx(10.0 * first, rel=1e-12)
        ratios.append(first)
    # Warm-up: 0.2 + 0.8 * i / 2 at i = 0, 1. Then 0.1 + 0.9 * (1 + cos(pi * k / 6)) / 2 with
    # k = i - 1 for i = 2..8: cos at k = 1..6 is sqrt(3)/2, 1/2, 0, -1/2, -sqrt(3)/2, -1; past
    # the end the cosine rises again (DeepSpeed does not clamp the iteration).
    half = [(1 + c) / 2 for c in (math.sqrt(3) / 2, 0.5, 0.0, -0.5, -math.sqrt(3) / 2, -1.0, -math.sqrt(3) / 2)]
    expected = [0.2, 0.6] + [0.1 + 0.9 * h for h in half]
    assert ratios == pytest.approx(expected, rel=1e-12)


def test_lr_range_test_continuous_and_staircase():
    params = {"lr_range_test_min_lr": 1.0, "lr_range_test_step_size": 2, "lr_range_test_step_rate": 3.0}
    # lr = min * (1 + rate * (i + 1) / size), from iteration -1 (the construction) on.
    assert _walk({"type": "LRRangeTest", "params": params}, 4) == pytest.approx([1, 2.5, 4, 5.5, 7])
    staircase = dict(params, lr_range_test_staircase=True)
    assert _walk({"type": "LRRangeTest", "params": staircase}, 4) == pytest.approx([1, 1, 4, 4, 7])


def test_state_dict_round_trip_restores_the_lrs():
    block = {
        "type": "WarmupDecayLR",
        "params": {"total_num_steps": 10, "warmup_max_lr": 6.0, "warmup_num_steps": 4, "warmup_type": "linear"},
    }
    first = _optimizer()
    schedule = schedulers.build(block, first)
    for _ in range(7):
        schedule.step()
    state = schedule.state_dict()
    assert state == {"last_batch_iteration": 6}

    resumed_optimizer = _optimizer()
    resumed = schedulers.build(block, resumed_optimizer)
    resumed.load_state_dict(state)
    assert _lrs(resumed_optimizer) == _lrs(first) == pytest.approx([4.0, 4.0])
    schedule.step()
    resumed.step()
    assert _lrs(resumed_optimizer) == _lrs(first)


def test_torch_scheduler_by_name():
    optimizer = _optimizer((1.0, 1.0))
    schedule = schedulers.build({"type": "StepLR", "params": {"step_size": 1, "gamma": 0.5}}, optimizer)
    optimizer.step()
    schedule.step()
    assert _lrs(optimizer) == [0.5, 0.5]


def test_get_last_lr_before_any_lr_was_set_says_so():
    optimizer = _optimizer()
    schedule = schedulers.WarmupLR(optimizer, last_batch_iteration=3)
    with pytest.raises(RuntimeError, match="get_last_lr"):
        schedule.get_last_lr()


@pytest.mark.parametrize(
    "block, words",
    [
        ({"type": "WarmupLR", "params": {"warmup_max": 1e-3}}, "warmup_max"),
        ({"type": "WarmupDecayLR", "params": {}}, "total_num_steps"),
        ({"type": "NoSuchLR", "params": {}}, "scheduler.type"),
        ({"type": "OneCycle", "params": {}}, "OneCycle"),
        ({"params": {}}, "scheduler.type"),
        ({"type": "WarmupLR", "params": {"warmup_max_lr": [1.0, 2.0, 3.0]}}, "warmup_max_lr"),
        ({"type": "WarmupLR", "params": {"warmup_num_steps": 2.5}}, "warmup_num_steps"),
        ({"type": "WarmupCosineLR", "params": {"total_num_steps": 10, "warmup_type": "cubic"}}, "warmup_type"),
        ({"type": "WarmupCosineLR", "params": {"total_num_steps": 5, "warmup_num_steps": 5}}, "total_num_steps"),
        ({"type": "WarmupLR", "params": {}, "typo": 1}, "typo"),
    ],
)
def test_bad_block_names_the_key_and_touches_no_lr(block, words):
    optimizer = _optimizer((0.25, 0.5))
    with pytest.raises(ValueError, match=words):
        schedulers.build(block, optimizer)
    assert _lrs(optimizer) == [0.25, 0.5]


def test_unknown_warmup_type_falls_back_to_log_with_a_warning_as_deepspeed():
    block = {"type": "WarmupLR", "params": {"warmup_max_lr": 2.0, "warmup_num_steps": 4, "warmup_type": "cubic"}}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lrs = _walk(block, 2)
    assert any("warmup_type" in str(w.message) for w in caught)
    assert lrs == pytest.approx([0.0, 0.0, 1.0])  # ln 2 / ln 4 = 1/2 of 2.0
