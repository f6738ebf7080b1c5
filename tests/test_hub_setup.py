"""The course hub's set-up, without starting it: GPU policies, what `course hub` refuses, and the
Jupyter configuration each server gets."""
from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from grading.hub import checks, gpus, permissions, server_ports, shared, start
from grading.hub.gpus import NodeDevices, NoDeviceLeft, visible_devices

REPO = Path(__file__).resolve().parents[1]
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
        settings = {"port": busy.getsockname()[1], "ip": "127.0.0.1"}
        assert not checks.port_free("127.0.0.1", settings["port"])
        [line] = checks.port_problems(settings)
        assert "is busy" in line and "set another `port`" in line


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free():
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server's side closes first: its port is left in TIME-WAIT
        client.recv(1)
        client.close()
    assert checks.port_free("127.0.0.1", port)


def test_without_npm_the_proxy_cannot_be_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(start.shutil, "which", lambda name: None)
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    with pytest.raises(start.HubNotReady, match="npm is missing"):
        start.find_proxy(tmp_path / "build")
    assert not (tmp_path / "build").exists()


def test_a_private_folder_on_the_way_to_python_is_named(tmp_path):
    private = tmp_path / "private"
    (private / "bin").mkdir(parents=True)
    (private / "bin" / "python").write_text("")
    (private / "bin" / "python").chmod(0o755)
    private.chmod(0o700)
    [line] = checks.python_problems(str(private / "bin" / "python"))
    assert "is private" in line and 'python = "/usr/bin/python3"' in line


def test_accounts_without_a_password_are_named_with_the_fix(tmp_path):
    shadow = tmp_path / "shadow"
    shadow.write_text("ana:$6$salt$hash:19000:0:99999:7:::\nben:!:19000::::::\ncho:*:19000::::::\ndev::19000::::::\n")
    assert checks.without_password(["ana", "ben", "cho", "dev"], shadow) == ["ben", "cho", "dev"]
    assert checks.without_password(["ana"], tmp_path / "unreadable") == []


def test_every_missing_prerequisite_is_one_line_and_nothing_is_created(tmp_path, monkeypatch, capsys):
    exchange = tmp_path / "exchange"
    config = _settings(tmp_path, f'students = ["nobody-here-1"]\nexchange = "{exchange}"\nport = 18999\n'
                                 f'python = "{tmp_path / "no-python"}"\nshared = "{tmp_path / "shared"}"\n'
                                 f'class_dir = "{tmp_path / "class"}"\n')
    monkeypatch.setattr(checks.os, "geteuid", lambda: 1000)
    from grading.cli import main

    assert main(["hub", "--config", str(config), "--build-dir", str(tmp_path / "build")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4, err
    assert "run it as root" in err[0] and "no Unix account for nobody-here-1" in err[2], err
    # this test runs in the course's .venv, which holds the course editable: no place for the hub
    assert "the hub's environment" in err[1] and "installed editable" in err[1] and "sudo make hub" in err[1], err
    assert "no Python at" in err[3] and "set `python" in err[3], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub.toml"]


def test_make_hub_makes_its_own_environment_once_without_the_course_in_it(tmp_path):
    venv = tmp_path / "hub-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".installed").touch()
    result = subprocess.run(["make", "-n", "hub", f"HUB_VENV={venv}"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "pip install" not in result.stdout, result.stdout
    assert f"cd {REPO} && {venv}/bin/python -E -s -m grading.hub" in result.stdout, result.stdout
    (venv / ".installed").unlink()
    again = subprocess.run(["make", "-n", "hub", f"HUB_VENV={venv}"], cwd=REPO, capture_output=True, text=True)
    assert "grading/hub/requirements.py course hub slurm" in again.stdout, again.stdout
    installs = [line for line in again.stdout.splitlines() if "pip install" in line]
    assert installs and not any(" -e " in line or "'.[" in line for line in installs), installs


def test_the_hub_environments_requirements_are_the_courses_dependencies_and_not_the_course():
    from grading.hub.requirements import PYPROJECT, requirement_lines

    lines = requirement_lines(PYPROJECT, ["course", "hub", "slurm"])
    names = [re.split(r"[<>=!~\[ ]", line, maxsplit=1)[0] for line in lines]
    assert "torch==2.13.0" in lines and {"nbgrader", "jupyterhub", "batchspawner"} <= set(names), lines
    assert len(names) == len(set(names)) and "labutils" not in names, lines
    with pytest.raises(ValueError, match="no extra nope"):
        requirement_lines(PYPROJECT, ["hub", "nope"])


def test_the_hub_refuses_an_environment_that_holds_the_course_editable(tmp_path):
    venv = tmp_path / "env"
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "jupyterhub-5.0.0.dist-info").mkdir(parents=True)
    assert checks.environment_problems(venv) == []
    (site / "labutils-0.1.0.dist-info").mkdir()
    (site / "labutils-0.1.0.dist-info" / "direct_url.json").write_text('{"url": "file:///course", "dir_info": {"editable": true}}')
    [line] = checks.environment_problems(venv)
    assert "labutils-0.1.0.dist-info is installed editable" in line and "sudo make hub" in line


def test_homes_and_the_class_folder_are_closed_to_other_users(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    monkeypatch.setattr(permissions.pwd, "getpwnam", lambda name: SimpleNamespace(pw_dir=str(home)))
    [line] = permissions.close_homes(["ana"])
    assert "ana's home" in line and stat.S_IMODE(home.stat().st_mode) == 0o700
    assert permissions.close_homes(["ana"]) == []
    graded = tmp_path / "class" / "graded"
    graded.mkdir(parents=True)
    for name in ("gradebook.db", "grades.csv"):
        (graded / name).write_text("")
        (graded / name).chmod(0o644)
    permissions.close_to_others(tmp_path / "class", "the class folder")
    for path in (tmp_path / "class", graded, graded / "gradebook.db", graded / "grades.csv"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o007 == 0, path


def _class_settings(tmp_path: Path) -> Path:
    return _settings(tmp_path, f'students = ["ana"]\nexchange = "{tmp_path / "exchange"}"\n'
                               f'class_dir = "{tmp_path / "class"}"\n')


def test_class_release_creates_the_class_folder_and_feedback_without_grades_fails(tmp_path, capsys):
    from grading.cli import main

    config = _class_settings(tmp_path)
    (tmp_path / "exchange").mkdir()
    assert main(["class", "release", "lab02_collectives", "--config", str(config)]) == 0
    assert (tmp_path / "class").is_dir() and stat.S_IMODE((tmp_path / "class").stat().st_mode) & 0o007 == 0
    released = tmp_path / "exchange" / "multigpu" / "outbound" / "lab02_collectives" / "lab02_collectives.ipynb"
    assert released.is_file()
    assert main(["class", "collect", "lab02_collectives", "--config", str(config)]) == 0
    capsys.readouterr()
    assert main(["class", "feedback", "lab02_collectives", "--config", str(config)]) == 2
    assert "no feedback for lab02_collectives" in capsys.readouterr().err


def _hub_config(tmp_path, monkeypatch):
    """The hub's configuration (roster: ana; teacher: ivy), loaded as JupyterHub loads it."""
    from traitlets.config.loader import PyFileConfigLoader

    settings = _settings(tmp_path, f'students = ["ana"]\ninstructors = ["ivy"]\nexchange = "{tmp_path / "x"}"\n'
                                   f'shared = "{tmp_path / "shared"}"\n')
    for name, value in {"COURSE_HUB_CONFIG": settings, "COURSE_HUB_STATE": tmp_path,
                        "COURSE_HUB_PROXY": "configurable-http-proxy"}.items():
        monkeypatch.setenv(name, str(value))
    config = PyFileConfigLoader("jupyterhub_config.py", path=str(Path(start.__file__).parent)).load_config()
    assert config.Spawner.cmd[0] == str(tmp_path / "shared" / "venv" / "bin" / "python")
    return config


def _spawned(config, user: str) -> SimpleNamespace:
    """A spawner for ``user``'s server after the hub's pre-spawn hook (its environment and port)."""
    spawner = SimpleNamespace(user=SimpleNamespace(name=user), environment=dict(config.Spawner.environment),
                              log=logging.getLogger("test"), port=0)
    config.Spawner.pre_spawn_hook(spawner)
    return spawner


def _spawned_environment(tmp_path, monkeypatch, user: str) -> dict:
    """The environment the hub's configuration gives ``user``'s server."""
    return _spawned(_hub_config(tmp_path, monkeypatch), user).environment


def test_each_server_gets_a_port_below_the_ephemeral_range_and_none_another_starting_server_has(tmp_path, monkeypatch):
    """Not jupyterhub's own pick (a released port 0, in the range every rank's connection draws from)."""
    config = _hub_config(tmp_path, monkeypatch)
    ports = [_spawned(config, user).port for user in ("ana", "ivy", "ana", "ivy")]
    assert len(set(ports)) == len(ports), ports
    assert all(server_ports.LOWEST_PORT <= port < server_ports.first_ephemeral_port() for port in ports), ports


def test_a_port_is_handed_out_free_and_not_again_while_its_server_may_be_starting(monkeypatch):
    class Scripted:  # the picks, in order
        def __init__(self, *picks):
            self.picks = list(picks)

        def randrange(self, low, high):
            return self.picks.pop(0)

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        free = server_ports.free_port_block(2)
        monkeypatch.setattr(server_ports, "first_ephemeral_port", lambda: 65000)
        monkeypatch.setattr(server_ports, "_pick", Scripted(taken, free, free, free + 1))
        starting = server_ports.ServerPorts(hold_s=120)
        assert starting.take() == free  # the busy port is passed over
        assert starting.take() == free + 1  # the first is held for its server, which may still be starting
        monkeypatch.setattr(server_ports, "_pick", Scripted(free))
        assert server_ports.ServerPorts(hold_s=0).take() == free  # held no longer


def test_every_server_on_the_hub_gets_the_check_my_lab_button(tmp_path, monkeypatch):
    from test_jupyter_check import button_setup

    from labutils.command.jupyter_check import COURSE_JUPYTER_CONFIG

    hub_dir = Path(start.__file__).parent
    for role in shared.ROLES:  # what the hub copies into the shared folder at start
        shutil.copytree(hub_dir / f"{role}_config", tmp_path / "shared" / "config" / f"{role}_config")
    shutil.copytree(COURSE_JUPYTER_CONFIG, tmp_path / "shared" / "course" / "labutils" / "data" / "jupyter")
    course_config = tmp_path / "shared" / "course" / "labutils" / "data" / "jupyter"
    for user, own in (("ana", "student_config"), ("ivy", "instructor_config")):
        folders = [Path(p) for p in _spawned_environment(tmp_path, monkeypatch, user)["JUPYTER_CONFIG_PATH"].split(os.pathsep)]
        assert folders == [tmp_path / "shared" / "config" / own, course_config], folders
        setup = button_setup(folders)
        assert setup["jpserver_extensions"]["labutils.command.jupyter_check"] is True, setup
        assert setup["labextensions"] == {"labutils-check": course_config / "labextensions" / "labutils-check"}
        if user == "ana":  # the student's own folder still switches the instructors' panels off
            assert setup["jpserver_extensions"]["nbgrader.server_extensions.formgrader"] is False


def test_fetch_feedback_before_a_release_says_so(tmp_path, monkeypatch):
    """The students' nbgrader configuration on the hub: Fetch Feedback with nothing released is an
    error with a message (the Assignment List shows it), not a silent no-op."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import ExchangeFactory
    from nbgrader.exchange.abc.exchange import ExchangeError
    from traitlets.config.loader import PyFileConfigLoader

    exchange, home = tmp_path / "exchange", tmp_path / "home"
    submitted = exchange / "multigpu" / "inbound"
    submitted.mkdir(parents=True)
    (exchange / "multigpu" / "feedback").mkdir()
    cache = tmp_path / "cache" / "multigpu" / f"{os.environ.get('USER', 'root')}+lab02_collectives+2026-11-27 08:00:00.000000 UTC"
    cache.mkdir(parents=True)
    (cache / "lab02_collectives.ipynb").write_text("{}")
    (cache / "submission_secret.txt").write_text("secret")
    home.mkdir()
    monkeypatch.setenv("COURSE_EXCHANGE", str(exchange))
    monkeypatch.setenv("COURSE_ID", "multigpu")
    config = PyFileConfigLoader("nbgrader_config.py", path=str(Path(start.__file__).parent / "student_config")).load_config()
    config.Exchange.cache = str(tmp_path / "cache")
    config.Exchange.assignment_dir = str(home)
    config.CourseDirectory.assignment_id = "lab02_collectives"
    fetch = ExchangeFactory(config=config).FetchFeedback(coursedir=CourseDirectory(config=config),
                                                         authenticator=Authenticator(config=config), config=config)
    with pytest.raises(ExchangeError, match="No feedback for lab02_collectives yet"):
        fetch.start()


def test_a_students_environment_that_reaches_the_checkout_is_refused(tmp_path):
    from grading.hub import shared

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "labutils-0.1.0.dist-info").mkdir(parents=True)
    (site / "labutils-0.1.0.dist-info" / "direct_url.json").write_text('{"dir_info": {}, "url": "file:///srv/course"}')
    (site / "inside.pth").write_text(f"{site / 'extra'}\n# a comment\nimport site\n")
    assert shared.outside_code(tmp_path / "venv") == []
    (site / "labutils-0.1.0.dist-info" / "direct_url.json").write_text(
        '{"dir_info": {"editable": true}, "url": "file:///work/course"}')
    (site / "__editable___labutils_0_1_0_finder.py").write_text("MAPPING = {'grading': '/work/course/grading'}\n")
    (site / "course.pth").write_text("/work/course\n")
    found = shared.outside_code(tmp_path / "venv")
    assert len(found) == 3 and "installed editable" in found[0] and "/work/course" in found[2], found
    with pytest.raises(ValueError, match="reaches code outside it"):
        shared._refuse_outside_code(tmp_path / "venv")


def test_the_hubs_own_environment_outside_the_checkout_is_closed_too(tmp_path, monkeypatch):
    from grading.hub import start

    checkout, venv = tmp_path / "checkout", tmp_path / "opt-multigpu"
    for folder in (checkout, venv):
        folder.mkdir(mode=0o755)
        os.chmod(folder, 0o755)
    monkeypatch.setattr(start.sys, "prefix", str(venv))
    monkeypatch.setattr(start.sys, "base_prefix", "/usr")
    settings = {"class_dir": str(tmp_path / "class"), "students": [], "instructors": []}
    changed = start.secure(settings, checkout)
    assert any("the hub's environment" in line for line in changed), changed
    assert venv.stat().st_mode & 0o007 == 0 and checkout.stat().st_mode & 0o007 == 0
