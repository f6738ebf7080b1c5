"""The course hub's set-up, without starting it: GPU policies, what `course hub` refuses, and the
Jupyter configuration each server gets."""
from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from grading.hub import gpus, start
from grading.hub.gpus import NodeDevices, NoDeviceLeft, visible_devices

FOUR = NodeDevices(gpus=tuple(f"GPU-{k}" for k in range(4)))
ROSTER = ["ana", "ben", "cho", "dev", "eli", "fay"]


def test_round_robin_gives_each_student_its_block_and_shares_when_the_node_is_full():
    masks = [visible_devices("round_robin", name, ROSTER, FOUR) for name in ROSTER]
    assert masks == ["GPU-0", "GPU-1", "GPU-2", "GPU-3", "GPU-0", "GPU-1"]
    pairs = [visible_devices("round_robin", name, ROSTER, FOUR, gpus_per_student=2) for name in ROSTER[:3]]
    assert pairs == ["GPU-0,GPU-1", "GPU-2,GPU-3", "GPU-0,GPU-1"]


def test_blocks_are_never_shared_and_a_student_beyond_them_is_refused():
    assert visible_devices("blocks", "ben", ROSTER, FOUR, gpus_per_student=2) == "GPU-2,GPU-3"
    with pytest.raises(NoDeviceLeft, match="no block of GPUs left for cho"):
        visible_devices("blocks", "cho", ROSTER, FOUR, gpus_per_student=2)
    with pytest.raises(NoDeviceLeft, match="would need 8 GPUs"):
        visible_devices("round_robin", "ana", ROSTER, FOUR, gpus_per_student=8)


def test_mig_gives_one_slice_each():
    node = NodeDevices(gpus=("GPU-0",), mig_slices=("MIG-a", "MIG-b", "MIG-c"))
    assert [visible_devices("mig", name, ROSTER[:3], node) for name in ROSTER[:3]] == ["MIG-a", "MIG-b", "MIG-c"]
    with pytest.raises(NoDeviceLeft, match="no MIG slice left"):
        visible_devices("mig", "dev", ROSTER, node)


def test_a_node_without_gpus_runs_everyone_on_gloo_and_bad_policies_are_errors():
    assert visible_devices("round_robin", "ana", ROSTER, NodeDevices()) == ""
    assert visible_devices("mig", "ana", ROSTER, NodeDevices()) == ""
    with pytest.raises(ValueError, match="unknown GPU policy"):
        visible_devices("random", "ana", ROSTER, FOUR)
    with pytest.raises(NoDeviceLeft, match="not on the course roster"):
        visible_devices("round_robin", "mallory", ROSTER, FOUR)


def test_discover_finds_nothing_without_a_driver():
    assert gpus.discover() == NodeDevices()  # this machine has no NVML library


def _settings(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "hub.toml"
    path.write_text(text)
    return path


def test_settings_are_checked_before_anything_starts(tmp_path):
    with pytest.raises(start.HubNotReady, match="no hub configuration"):
        start.load_settings(tmp_path / "missing.toml")
    with pytest.raises(start.HubNotReady, match="not valid TOML"):
        start.load_settings(_settings(tmp_path, "students = ["))
    with pytest.raises(start.HubNotReady, match="list the students"):
        start.load_settings(_settings(tmp_path, 'exchange = "/tmp/x"\n'))
    with pytest.raises(start.HubNotReady, match="is not one of"):
        start.load_settings(_settings(tmp_path, 'students = ["a"]\n[gpus]\npolicy = "random"\n'))


def test_a_busy_port_is_refused():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(start.HubNotReady, match="is busy"):
            start.check_port_free("127.0.0.1", busy.getsockname()[1])


def test_without_npm_the_proxy_cannot_be_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(start.shutil, "which", lambda name: None)
    with pytest.raises(start.HubNotReady, match="npm is missing"):
        start.find_proxy(tmp_path / "build")
    assert not (tmp_path / "build").exists()


def test_a_private_folder_on_the_way_to_python_is_named(tmp_path):
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    (private / "bin" / "python").write_text("")
    private.chmod(0o700)
    with pytest.raises(start.HubNotReady, match="is private"):
        start.check_readable_by_everyone(private / "bin" / "python", "the course's Python")


def test_nothing_is_created_when_a_check_fails(tmp_path, monkeypatch, capsys):
    exchange = tmp_path / "exchange"
    config = _settings(tmp_path, f'students = ["nobody-here-1"]\nexchange = "{exchange}"\nport = 18999\n')
    monkeypatch.setattr(start.os, "geteuid", lambda: 0)
    from grading.cli import main

    assert main(["hub", "--config", str(config), "--build-dir", str(tmp_path / "build")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Unix account for nobody-here-1" in err[0], err
    assert not exchange.exists() and not (tmp_path / "build").exists()


def _spawned_environment(tmp_path, monkeypatch, user: str) -> dict:
    """The environment the hub's configuration gives ``user``'s server (roster: ana; teacher: ivy)."""
    from traitlets.config.loader import PyFileConfigLoader

    settings = _settings(tmp_path, f'students = ["ana"]\ninstructors = ["ivy"]\nexchange = "{tmp_path / "x"}"\n')
    for name, value in {"COURSE_HUB_CONFIG": settings, "COURSE_HUB_STATE": tmp_path, "COURSE_HUB_PYTHON": sys.executable,
                        "COURSE_HUB_PROXY": "configurable-http-proxy"}.items():
        monkeypatch.setenv(name, str(value))
    config = PyFileConfigLoader("jupyterhub_config.py", path=str(Path(start.__file__).parent)).load_config()
    spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment=dict(config.Spawner.environment),
                              log=logging.getLogger("test"))
    config.Spawner.pre_spawn_hook(spawner)
    return spawner.environment


def test_every_server_on_the_hub_gets_the_check_my_lab_button(tmp_path, monkeypatch):
    from test_jupyter_check import button_setup

    from labutils.jupyter_check import COURSE_JUPYTER_CONFIG

    for user, own in (("ana", "student_config"), ("ivy", "instructor_config")):
        folders = [Path(p) for p in _spawned_environment(tmp_path, monkeypatch, user)["JUPYTER_CONFIG_PATH"].split(os.pathsep)]
        assert folders == [Path(start.__file__).parent / own, COURSE_JUPYTER_CONFIG], folders
        setup = button_setup(folders)
        assert setup["jpserver_extensions"]["labutils.jupyter_check"] is True, setup
        assert setup["labextensions"] == {"labutils-check": COURSE_JUPYTER_CONFIG / "labextensions" / "labutils-check"}
        if user == "ana":  # the student's own folder still switches the instructors' panels off
            assert setup["jpserver_extensions"]["nbgrader.server_extensions.formgrader"] is False
