"""zoe.footprint_plan and zoe.launcher_ranks."""

import pytest

import zoe

from test_core_train import build_mlp, nvme_config

FIELDS = {
    "device_bytes",
    "pinned_bytes",
    "host_bytes",
    "disk_bytes",
    "activation_host_bytes",
    "activation_nvme_bytes",
    "activation_prefetch_bytes",
}


def test_the_plan_is_a_dict_of_the_footprint_fields(tmp_path):
    with build_mlp() as model:
        nvme = zoe.footprint_plan(model, nvme_config(tmp_path))
        in_memory = zoe.footprint_plan(model, {"zoe": {"device": {"kind": "host"}}})
        assert set(nvme) == FIELDS and set(in_memory) == FIELDS
        assert all(isinstance(v, int) for v in nvme.values())
        assert nvme["disk_bytes"] > 0 and in_memory["disk_bytes"] == 0
        assert nvme["device_bytes"] > 0
        # The overrides are merged over the configuration, as Engine merges them.
        overridden = zoe.footprint_plan(
            model, {"zoe": {"device": {"kind": "host"}}}, config_overrides={"zero_optimization": nvme_config(tmp_path)["zero_optimization"], "aio": nvme_config(tmp_path)["aio"]}
        )
        assert overridden == nvme
        assert not list(tmp_path.iterdir()), "planning must create no swap file"


def test_the_plan_refuses_bad_input_naming_it(tmp_path):
    with build_mlp() as model:
        with pytest.raises(zoe.UsageError, match="world_size"):
            zoe.footprint_plan(model, {}, world_size=0)
        with pytest.raises(zoe.ConfigError, match="nvme_path"):
            zoe.footprint_plan(model, {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})
    with pytest.raises(zoe.UsageError, match="closed"):
        zoe.footprint_plan(model, {})


def test_launcher_ranks_read_the_environment(monkeypatch):
    for name in ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert zoe.launcher_ranks() == zoe.Ranks(0, 1, 1, 0, 0, 1)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2")
    assert zoe.launcher_ranks() == zoe.Ranks(rank=3, world_size=4, ranks_per_node=2, node=1, local_rank=1, nodes=2)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "four")
    with pytest.raises(zoe.UsageError, match="OMPI_COMM_WORLD_RANK"):
        zoe.launcher_ranks()
