"""Every failed zoe call raises the exception class of its zoe_status, with zoe_last_error()'s text."""

import builtins
import os
import pickle
import subprocess
import sys

import pytest

import zoe
from zoe import _capi

HOST = {"zoe": {"device": {"kind": "host"}}}


def one_parameter_model():
    model = zoe.Model()
    module = model.add_module("m0")
    model.add_parameter(module, "w", (4, 2), init="normal", scale=0.1, seed=1)
    return model


def test_each_status_has_its_class_and_the_builtin_it_means():
    expected = {
        1: zoe.InternalError,
        2: zoe.UsageError,
        3: zoe.ConfigError,
        4: zoe.IOError,
        5: zoe.CorruptError,
        6: zoe.MemoryError,
        7: zoe.DeviceError,
        8: zoe.CommError,
        9: zoe.TimeoutError,
    }
    for status, cls in expected.items():
        error = zoe.errors.error_for_status(status, f"message {status}")
        assert type(error) is cls and isinstance(error, zoe.Error)
        assert error.status == status and error.message == f"message {status}" and str(error) == f"message {status}"
        assert pickle.loads(pickle.dumps(error)).message == error.message
    assert issubclass(zoe.IOError, builtins.OSError)
    assert issubclass(zoe.MemoryError, builtins.MemoryError)
    assert issubclass(zoe.TimeoutError, builtins.TimeoutError)
    unknown = zoe.errors.error_for_status(42, "newer")
    assert type(unknown) is zoe.Error and unknown.status == 42


def test_a_bad_config_value_is_a_config_error_naming_the_key():
    with one_parameter_model() as model:
        with pytest.raises(zoe.ConfigError, match=r"zero_optimization\.stage") as caught:
            zoe.Engine(model, {**HOST, "zero_optimization": {"stage": "three"}})
        assert caught.value.status == 3
        with pytest.raises(zoe.ConfigError, match=r"config_overrides.*gradient_clipping|gradient_clipping"):
            zoe.Engine(model, HOST, config_overrides={"gradient_clipping": -1})


def test_config_as_json_text_and_as_a_path(tmp_path):
    path = tmp_path / "zoe.json"
    path.write_text('{"zoe": {"device": {"kind": "host"}}, "optimizer": {"params": {"lr": 0.5}}}')
    with one_parameter_model() as model:
        for config in (path, str(path), path.read_text()):
            with zoe.Engine(model, config) as engine:
                assert engine.device.kind == "host"
                assert engine._default_lr == 0.5
        with pytest.raises(zoe.Error, match="nowhere.json"):
            zoe.Engine(model, str(tmp_path / "nowhere.json"))


def test_a_backward_fetch_outside_a_micro_batch_is_a_usage_error():
    with one_parameter_model() as model, zoe.Engine(model, HOST) as engine:
        with pytest.raises(zoe.UsageError, match="micro-batch") as caught:
            engine.fetch(0, "backward")
        assert caught.value.status == 2
        engine.begin_micro_batch()
        with pytest.raises(zoe.UsageError, match="micro-batch"):
            engine.begin_micro_batch()
        with pytest.raises(zoe.UsageError, match="pass_"):
            engine.fetch(0, "sideways")


def test_bad_model_input_names_the_parameter():
    with zoe.Model() as model:
        module = model.add_module("m0")
        with pytest.raises(zoe.UsageError, match="m0"):
            model.add_module("m0")
        with pytest.raises(zoe.UsageError, match="'w'.*dtype"):
            model.add_parameter(module, "w", (2,), dtype="fp8")
        with pytest.raises(zoe.UsageError, match="'w'.*3 values"):
            model.add_parameter(module, "w", (2, 2), data=[1, 2, 3])
        with pytest.raises(zoe.UsageError, match="'w'.*extent"):
            model.add_parameter(module, "w", (2, 0))
        with pytest.raises(zoe.UsageError, match="'w'"):
            model.add_parameter(7, "w", (2,))
        # Failed adds leave the model as it was: the name is still free.
        assert model.add_parameter(module, "w", (2,)) == 0
        assert model.parameters == [zoe.ParameterInfo("w", 0, (2,), "fp32", False, 0)]


def test_a_closed_object_refuses_calls():
    engine = zoe.Engine(one_parameter_model(), HOST)
    engine.close()
    engine.close()  # idempotent
    with pytest.raises(zoe.UsageError, match="closed"):
        engine.begin_micro_batch()
    with pytest.raises(zoe.UsageError, match="engine that is closed"):
        engine.device.memory()


def test_a_function_the_library_lacks_is_a_usage_error_naming_it(monkeypatch):
    library = _capi.lib()
    monkeypatch.setattr(library, "zoe_loss_scale", _capi._Missing("zoe_loss_scale", library.path))
    with one_parameter_model() as model, zoe.Engine(model, HOST) as engine:
        with pytest.raises(zoe.UsageError, match="zoe_loss_scale.*does not export"):
            engine.loss_scale()
        assert engine.ranks().world_size == 1  # the other functions still work


def run_python(code, **env):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env}, check=False
    )


def test_import_needs_no_torch_and_no_library_until_a_call():
    code = (
        "import sys, zoe\n"
        "assert 'torch' not in sys.modules, 'import zoe imported torch'\n"
        "try:\n"
        "    zoe.version()\n"
        "except OSError as e:\n"
        "    print(e)\n"
    )
    result = run_python(code, ZOE_LIBRARY="/nonexistent/libzoe_c.so")
    assert result.returncode == 0, result.stderr
    assert "$ZOE_LIBRARY (/nonexistent/libzoe_c.so)" in result.stdout
