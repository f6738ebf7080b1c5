"""labutils.ranks.multinode.load_target: module:function from the current folder, with no sys.path edit."""
from __future__ import annotations

import sys

import pytest

from labutils.ranks.multinode import load_target
from labutils.command.usage import UsageError


def test_a_module_in_the_current_folder_is_found_without_touching_sys_path(tmp_path, monkeypatch):
    (tmp_path / "labutils_test_cwd_module.py").write_text("def train(x):\n    return x * 2\n")
    package = tmp_path / "labutils_test_cwd_package"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "steps.py").write_text("def step():\n    return 'stepped'\n")
    monkeypatch.chdir(tmp_path)
    for name in ("labutils_test_cwd_module", "labutils_test_cwd_package", "labutils_test_cwd_package.steps"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    path_before = list(sys.path)
    assert load_target("labutils_test_cwd_module:train")(21) == 42
    assert load_target("labutils_test_cwd_package.steps:step")() == "stepped"
    assert sys.path == path_before


def test_installed_modules_import_as_usual_and_bad_targets_say_why(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import json

    assert load_target("json:dumps") is json.dumps
    with pytest.raises(UsageError, match="cannot import 'labutils_no_such_module'"):
        load_target("labutils_no_such_module:f")
    with pytest.raises(UsageError, match="has no function 'nothing'"):
        load_target("json:nothing")
