"""Engine states between steps: write_state, checkpoints (with client bytes), frozen parameters and
per-group steps."""

import numpy as np
import pytest

import zoe

from test_core_train import LR, WEIGHT_DECAY, batches, build_mlp, host_view, train_step_through_zoe

HOST = {"zoe": {"device": {"kind": "host"}}, "gradient_accumulation_steps": 2, "gradient_clipping": 0.0}


@pytest.fixture
def trained():
    """An engine of build_mlp() after one step (so it has Adam moments), and its stream."""
    model = build_mlp()
    engine = zoe.Engine(model, HOST)
    stream = zoe.Stream(engine.device)
    model.close()
    train_step_through_zoe(engine, stream, batches(seed=5)[0])
    yield engine, stream
    stream.close()
    engine.close()


def test_write_state_sets_a_value_read_state_gives_back(trained):
    engine, _ = trained
    values = np.arange(np.prod(engine.parameters[2].shape), dtype=np.float32).reshape(engine.parameters[2].shape)
    engine.write_state(2, values)
    engine.write_state(2, values / 7, state="exp_avg")
    np.testing.assert_array_equal(engine.read_state(2), values)
    np.testing.assert_array_equal(engine.read_state(2, "exp_avg"), values / 7)
    with pytest.raises(zoe.UsageError, match="'w1'.*index 1"):
        engine.write_state(2, np.where(np.arange(values.size) == 1, np.inf, 0))
    np.testing.assert_array_equal(engine.read_state(2), values)  # the failed write changed nothing
    with pytest.raises(zoe.UsageError, match="state 'momentum'"):
        engine.write_state(2, values, state="momentum")


def test_a_checkpoint_load_restores_what_was_saved(trained, tmp_path):
    engine, _ = trained
    saved = {(p, s): engine.read_state(p, s) for p in range(4) for s in ("parameter", "exp_avg", "exp_avg_sq")}
    engine.checkpoint_save(tmp_path, tag="one")
    assert (tmp_path / "one").is_dir()
    for p in range(4):
        engine.write_state(p, np.zeros(engine.parameter_numel(p)))
    engine.checkpoint_load(tmp_path)
    for (p, s), values in saved.items():
        np.testing.assert_array_equal(engine.read_state(p, s), values)
    with pytest.raises(zoe.UsageError, match="latest"):
        engine.checkpoint_save(tmp_path, tag="latest")
    with pytest.raises(zoe.CorruptError, match="missing"):
        engine.checkpoint_load(tmp_path, tag="missing")


def test_checkpoint_client_bytes_come_back_after_a_load(trained, tmp_path):
    engine, _ = trained
    assert engine.checkpoint_client() is None
    blob = bytes(range(256)) * 3
    engine.checkpoint_save(tmp_path, client=blob)
    engine.checkpoint_load(tmp_path)
    assert engine.checkpoint_client() == blob


def test_a_frozen_parameter_gets_no_gradient_and_keeps_its_value():
    with zoe.Model() as model:
        module = model.add_module("m0")
        frozen = model.add_parameter(module, "frozen", (3,), data=[1.0, 2.0, 3.0], frozen=True)
        trained_id = model.add_parameter(module, "trained", (3,), data=[1.0, 2.0, 3.0])
        assert model.parameters[frozen].frozen and not model.parameters[trained_id].frozen
        with zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}}) as engine, zoe.Stream(engine.device) as stream:
            engine.begin_micro_batch()
            engine.fetch(module, "backward", stream)
            buffers = engine.module_gradients(module, stream)
            assert buffers[frozen] == 0 and buffers[trained_id] != 0
            stream.synchronize()
            host_view(buffers[trained_id], (3,))[:] = 1.0
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
            engine.end_micro_batch()
            engine.step(lr=0.1)
            np.testing.assert_array_equal(engine.read_state(frozen), [1.0, 2.0, 3.0])
            assert np.all(engine.read_state(trained_id) < [1.0, 2.0, 3.0])
            with pytest.raises(zoe.UsageError, match="frozen"):
                engine.read_state(frozen, "exp_avg")


def test_each_group_steps_with_its_own_lr():
    with zoe.Model() as model:
        module = model.add_module("m0")
        group0 = model.add_parameter(module, "g0", (2,), data=[1.0, 1.0])
        group1 = model.add_parameter(module, "g1", (2,), data=[1.0, 1.0], group=1)
        with zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}}) as engine, zoe.Stream(engine.device) as stream:
            engine.begin_micro_batch()
            engine.fetch(module, "backward", stream)
            buffers = engine.module_gradients(module, stream)
            stream.synchronize()
            for buffer in buffers:
                host_view(buffer, (2,))[:] = 1.0
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
            engine.end_micro_batch()
            with pytest.raises(zoe.UsageError, match="2"):
                engine.step(groups=[(LR, WEIGHT_DECAY)])
            with pytest.raises(zoe.UsageError, match="groups\\[1\\]"):
                engine.step(groups=[(LR, 0.0), "fast"])
            engine.step(groups=[(LR, 0.0), (0.0, 0.0)])
            assert np.all(engine.read_state(group0) < 1.0)
            np.testing.assert_array_equal(engine.read_state(group1), [1.0, 1.0])


def test_a_loaded_checkpoint_gives_back_each_groups_lr_and_weight_decay(tmp_path):
    with zoe.Model() as model:
        module = model.add_module("m0")
        model.add_parameter(module, "g0", (2,), data=[1.0, 1.0])
        model.add_parameter(module, "g2", (2,), data=[1.0, 1.0], group=2)
        with zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}}) as engine, zoe.Stream(engine.device) as stream:
            with pytest.raises(zoe.UsageError, match="no checkpoint was loaded"):
                engine.checkpoint_groups()
            engine.begin_micro_batch()
            engine.fetch(module, "backward", stream)
            engine.module_gradients(module, stream)
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
            engine.end_micro_batch()
            settings = [(0.5, 0.25), (0.125, 0.0), (0.0625, 0.5)]
            engine.step(groups=settings)
            engine.checkpoint_save(tmp_path, client=b"epoch 3")
            engine.checkpoint_load(tmp_path)
            assert [(g.lr, g.weight_decay) for g in engine.checkpoint_groups()] == settings
            assert {g.betas for g in engine.checkpoint_groups()} == {(0.9, 0.999)}  # the configuration's
            assert engine.checkpoint_client() == b"epoch 3"
            # Betas and eps of each group's own come back too.
            engine.begin_micro_batch()
            engine.fetch(module, "backward", stream)
            engine.module_gradients(module, stream)
            engine.reduce_gradients(module, stream)
            engine.release(module, stream)
            engine.end_micro_batch()
            own = [(0.5, 0.25, (0.8, 0.99), 1e-6), (0.125, 0.0, (0.0, 0.5), 1e-3), (0.0625, 0.5, (0.7, 0.9), 0.25)]
            engine.step(groups=own)
            engine.checkpoint_save(tmp_path, tag="own")
            engine.checkpoint_load(tmp_path, tag="own")
            assert engine.checkpoint_groups() == own


def test_a_forward_fetch_outside_a_micro_batch_is_for_inference():
    with zoe.Model() as model:
        module = model.add_module("m0")
        parameter = model.add_parameter(module, "w", (2,), data=[3.0, 4.0])
        with zoe.Engine(model, {"zoe": {"device": {"kind": "host"}}}) as engine, zoe.Stream(engine.device) as stream:
            engine.fetch(module, "forward", stream)
            stream.synchronize()
            np.testing.assert_array_equal(host_view(engine.parameter_address(parameter), (2,)), [3.0, 4.0])
            with pytest.raises(zoe.UsageError, match="'m0' is fetched for inference"):
                engine.begin_micro_batch()
            engine.release(module, stream)
            engine.begin_micro_batch()
