"""zoe.torch.launch: which ranks initialize trains with, read from the launch's environment."""

import pytest

pytest.importorskip("torch")

from zoe.torch import launch  # noqa: E402

_TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
_LAUNCHER_KEYS = ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_SIZE", "PMI_RANK", "PMIX_RANK")


@pytest.fixture
def no_launcher(monkeypatch):
    for key in tuple(_TORCHRUN) + _LAUNCHER_KEYS:
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def test_a_plain_process_is_one_rank(no_launcher):
    assert launch.torchrun_world_size() == 0
    assert launch.engine_comm() == {}


def test_torchrun_environment_is_read(no_launcher):
    for key, value in _TORCHRUN.items():
        no_launcher.setenv(key, value)
    assert launch.torchrun_world_size() == 2


def test_world_size_of_one_needs_no_communicator(no_launcher):
    for key, value in dict(_TORCHRUN, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0").items():
        no_launcher.setenv(key, value)
    assert launch.engine_comm() == {}


@pytest.mark.parametrize(
    "change, words",
    [
        ({"MASTER_PORT": None}, "MASTER_PORT"),
        ({"RANK": "one"}, "RANK='one'"),
        ({"RANK": "2"}, "outside WORLD_SIZE=2"),
    ],
)
def test_a_broken_torchrun_environment_is_named(no_launcher, change, words):
    for key, value in dict(_TORCHRUN, **change).items():
        if value is not None:
            no_launcher.setenv(key, value)
    with pytest.raises(ValueError, match=words):
        launch.torchrun_world_size()
