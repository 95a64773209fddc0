"""zoe.torch.Init: parameters leave host memory as their module is built, keep their values, and
every patched class is put back."""

import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import zoe.torch.init_context as init_context  # noqa: E402
from zoe.torch.init_context import Init, initial_values, is_spooled, release_spool  # noqa: E402

_SRC = os.path.dirname(os.path.dirname(os.path.dirname(init_context.__file__)))


class _Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)
        self.norm = torch.nn.LayerNorm(width)


class _Tied(torch.nn.Module):
    """Embedding and head tied, and a parent that re-initialises its tree after building it (as
    GPT-2 implementations do): both must survive the spool."""

    def __init__(self, width=16, depth=3, vocab=50):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(_Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module):
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.normal_(module.weight, std=0.02)


def _build(seed, under_init, **kwargs):
    torch.manual_seed(seed)
    if not under_init:
        return _Tied(**kwargs)
    with Init():
        return _Tied(**kwargs)


def test_values_equal_a_model_built_without_init():
    plain = _build(3, False)
    spooled = _build(3, True)
    assert all(is_spooled(p) for p in spooled.parameters())
    assert spooled.head.weight is spooled.embed.weight
    plain_state, spooled_state = plain.state_dict(), spooled.state_dict()
    assert list(plain_state) == list(spooled_state)
    for name, value in plain_state.items():
        assert torch.equal(value, spooled_state[name]), name
    for (name, mine), theirs in zip(spooled.named_parameters(), plain.parameters()):
        values = initial_values(mine)
        assert values.dtype.name == "float32" and values.shape == (theirs.numel(),), name
        assert torch.equal(torch.from_numpy(values.copy()), theirs.detach().reshape(-1)), name


def test_a_subclass_that_reinitialises_its_parents_weights_is_spooled_after_it():
    class Scaled(torch.nn.Linear):
        def __init__(self):
            super().__init__(4, 3)
            with torch.no_grad():
                self.weight.fill_(7.0)

    with Init():
        layer = Scaled()
    assert is_spooled(layer.weight)
    assert float(initial_values(layer.weight).min()) == 7.0 == float(initial_values(layer.weight).max())


def test_a_16_bit_parameter_comes_back_as_float32():
    with Init():
        layer = torch.nn.Linear(8, 8, dtype=torch.bfloat16)
    values = initial_values(layer.weight)
    assert values.dtype.name == "float32"
    assert torch.equal(torch.from_numpy(values).reshape(8, 8), layer.weight.detach().float())


def test_param_data_replaced_after_construction_wins():
    with Init():
        layer = torch.nn.Linear(2, 2)
    layer.weight.data = torch.full((2, 2), 5.0)
    assert initial_values(layer.weight).tolist() == [5.0] * 4


def test_release_spool_empties_the_parameters():
    model = _build(0, True)
    release_spool(model.parameters())
    for param in model.parameters():
        assert not is_spooled(param)
        assert param.numel() == 0 and param.dtype == torch.float32
        assert initial_values(param) is None


def test_a_parameter_built_outside_init_has_no_initial_values():
    assert initial_values(torch.nn.Linear(2, 2).weight) is None


def test_every_class_is_restored_even_after_an_exception():
    linear_init = torch.nn.Linear.__init__
    had_hook = "__init_subclass__" in torch.nn.Module.__dict__
    with pytest.raises(RuntimeError, match="while building"):
        with Init():
            class Inside(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.w = torch.nn.Parameter(torch.ones(3))

            assert torch.nn.Linear.__init__ is not linear_init
            raise RuntimeError("while building")
    assert torch.nn.Linear.__init__ is linear_init
    assert ("__init_subclass__" in torch.nn.Module.__dict__) == had_hook
    assert not hasattr(Inside.__init__, "__wrapped__")
    assert not is_spooled(torch.nn.Linear(2, 2).weight)
    assert not is_spooled(Inside().w)


def test_a_failing_module_constructor_leaves_no_half_built_state():
    class Broken(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            raise ValueError("bad width")

    with Init():
        with pytest.raises(ValueError, match="bad width"):
            Broken()
        layer = torch.nn.Linear(2, 2)  # the next module still builds and spools
    assert is_spooled(layer.weight)


def test_nested_contexts_spool_once_and_restore_at_the_outer_exit():
    linear_init = torch.nn.Linear.__init__
    with Init():
        with Init():
            inner = torch.nn.Linear(2, 2)
        assert torch.nn.Linear.__init__ is not linear_init
        outer = torch.nn.Linear(2, 2)
    assert torch.nn.Linear.__init__ is linear_init
    assert is_spooled(inner.weight) and is_spooled(outer.weight)


def test_disabled_context_changes_nothing():
    with Init(enabled=False):
        layer = torch.nn.Linear(2, 2)
    assert not is_spooled(layer.weight)


def test_module_argument_spools_a_built_model():
    torch.manual_seed(5)
    model = _Tied()
    expected = {name: value.clone() for name, value in model.state_dict().items()}
    Init(module=model)
    assert all(is_spooled(p) for p in model.parameters())
    for name, value in model.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_spool_folder_comes_from_the_configuration(tmp_path):
    config = {"zero_optimization": {"offload_param": {"device": "nvme", "nvme_path": str(tmp_path)}}}
    with Init(config=config):
        layer = torch.nn.Linear(2, 2)
    assert is_spooled(layer.weight)
    assert os.listdir(tmp_path) == []  # the spool file is unlinked at once


def test_missing_nvme_path_is_named():
    config = {"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/no/such/folder"}}}
    with pytest.raises(ValueError, match="offload_optimizer.nvme_path"):
        Init(config=config)


_PEAK_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    torch.set_num_threads(1)
    from zoe.torch.init_context import Init

    def status(key):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError(key)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # 16 layers of 1024 x 1024 floats: 64 MiB of parameters, 4 MiB per module
            self.layers = torch.nn.ModuleList(torch.nn.Linear(1024, 1024) for _ in range(16))
            # and a parent that re-initialises them all once built, as GPT-2 implementations do
            for p in self.parameters():
                torch.nn.init.normal_(p, std=0.02)

    before = status("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # the peak from here on, not the import's
    except OSError:
        pass  # the peak then includes the import's, which only makes the check stricter
    if sys.argv[1] == "init":
        with Init():
            model = Model()
    else:
        model = Model()
    peak = status("VmHWM")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    print(peak - before, params)
    """
)


def _construction_peak(mode):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_SRC, os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, mode], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_construction_peak_rss_stays_below_half_the_parameters():
    grown, params = _construction_peak("init")
    assert grown < params / 2, f"under Init the construction grew RSS by {grown} bytes for {params} of parameters"
    # The same measurement without Init sees the whole model, so the check above can fail.
    plain_grown, _ = _construction_peak("plain")
    assert plain_grown >= params * 0.9, f"plain construction grew RSS by {plain_grown} for {params}"


def test_initialize_takes_the_values_of_a_model_built_under_init(tmp_path):
    import zoe.torch
    from models import GPT2
    from torch_training import offload_config, with_budget

    torch.manual_seed(7)
    plain = GPT2()
    config = offload_config(tmp_path, plain)
    torch.manual_seed(7)
    with Init(config=config):
        spooled = GPT2()
    engine, _, _, _ = zoe.torch.initialize(model=spooled, config=with_budget(spooled, config))
    try:
        assert not any(is_spooled(p) for p in spooled.parameters())
        state = engine.state_dict()
        expected = plain.state_dict()
        assert set(state) == set(expected)
        for name, value in expected.items():
            assert torch.equal(state[name], value), name
    finally:
        engine.close()
