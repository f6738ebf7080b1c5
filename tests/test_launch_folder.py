"""The folders launches make in the temporary directory (``labutils.ranks._launch_folder``): a folder
whose maker was killed together with its ranks is removed by the next start; a live maker's folder,
a young one, another labutils' folder without a lock, and anything that is not a plain folder stay;
a temporary directory whose path leaves no room for the ranks' socket is named before anything starts."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
import torch.distributed as dist

import labutils
from labutils.ranks import _launch_folder
from labutils.ranks._launch_folder import LOCK_NAME, LaunchFolder, sweep_abandoned
from labutils.ranks.errors import LaunchError

MAKER = textwrap.dedent("""
    import sys, time
    from labutils.ranks._launch_folder import LaunchFolder
    print(LaunchFolder().path, flush=True)
    time.sleep(600)
""")


def _start_maker(tmp_path):
    """A process that makes a launch folder in ``tmp_path`` and lives on: (process, folder)."""
    maker = subprocess.Popen([sys.executable, "-c", MAKER], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, TMPDIR=str(tmp_path)))
    return maker, maker.stdout.readline().strip()


def _age(folder: str, seconds: float) -> None:
    """Make ``folder``'s lock file look ``seconds`` old."""
    then = time.time() - seconds
    os.utime(os.path.join(folder, LOCK_NAME), (then, then))


def test_the_folder_of_a_killed_maker_is_swept_and_a_live_makers_is_not(tmp_path):
    maker, folder = _start_maker(tmp_path)
    try:
        assert os.path.isdir(folder) and folder.startswith(str(tmp_path))
        assert sweep_abandoned(str(tmp_path), min_age_s=0) == []
        assert os.path.isdir(folder)
    finally:
        maker.kill()
        maker.wait()
    assert sweep_abandoned(str(tmp_path), min_age_s=0) == [folder]
    assert not os.path.exists(folder)


def test_this_processs_own_folder_is_never_swept_and_is_removed_by_its_maker(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = LaunchFolder()
    _age(mine.path, 3600)
    assert sweep_abandoned(str(tmp_path), min_age_s=0) == []
    mine.remove()
    assert os.listdir(tmp_path) == []


def test_young_folders_unlocked_folders_files_and_links_are_left_alone(tmp_path):
    maker, young = _start_maker(tmp_path)
    maker.kill()
    maker.wait()
    without_lock = tmp_path / "labutils-older"
    (without_lock / "ranks.sock").mkdir(parents=True)
    (tmp_path / "labutils-a-file").write_text("not a folder")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / LOCK_NAME).write_text("")
    os.utime(target / LOCK_NAME, (0, 0))
    (tmp_path / "labutils-a-link").symlink_to(target)

    assert sweep_abandoned(str(tmp_path)) == []  # the killed maker's folder is seconds old
    assert sorted(os.listdir(tmp_path)) == sorted(
        [os.path.basename(young), "labutils-older", "labutils-a-file", "labutils-a-link", "elsewhere"])
    assert os.listdir(target) == [LOCK_NAME]


def test_a_start_sweeps_what_a_killed_caller_and_its_ranks_left(tmp_path, monkeypatch):
    maker, folder = _start_maker(tmp_path)
    maker.kill()
    maker.wait()
    _age(folder, _launch_folder.SWEEP_MIN_AGE_S + 1)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert labutils.launch(dist.get_rank, 2, backend="gloo") == [0, 1]
    assert os.listdir(tmp_path) == []  # the abandoned folder swept, this launch's own removed


def test_a_temporary_directory_too_long_for_the_socket_is_named_and_nothing_starts(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    with pytest.raises(LaunchError, match=r"no room for the ranks' socket .* Point TMPDIR at a folder"):
        labutils.launch(dist.get_rank, 2, backend="gloo")
    assert os.listdir(deep) == []


def test_on_a_file_system_without_locks_the_folder_has_no_lock_file_and_is_never_swept(tmp_path, monkeypatch):
    import errno
    import fcntl

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(fcntl, "flock", no_locks)
    folder = LaunchFolder()
    assert os.listdir(folder.path) == []
    monkeypatch.undo()
    assert sweep_abandoned(str(tmp_path), min_age_s=0) == [] and os.path.isdir(folder.path)
    folder.remove()
    assert not os.path.exists(folder.path)
