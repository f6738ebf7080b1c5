"""package_folders: every copy of a package an interpreter could import, not only the first."""
from __future__ import annotations

import sys

from grading.autograder.package_copies import other_copies, package_folders


def _package(root, name="course_pkg"):
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    return str((root / name).resolve())


def test_every_path_entry_holding_the_package_is_named_in_path_order(tmp_path):
    first, second = _package(tmp_path / "a"), _package(tmp_path / "b")
    (tmp_path / "c").mkdir()
    path = [str(tmp_path / "c"), str(tmp_path / "b"), str(tmp_path / "a"), str(tmp_path / "b")]
    assert package_folders("course_pkg", path=path) == [second, first]


def test_a_finder_that_maps_the_package_elsewhere_is_followed(tmp_path):
    mapped = _package(tmp_path / "checkout")

    class EditableFinder:  # what an editable install puts on sys.meta_path
        @staticmethod
        def find_spec(name, path=None, target=None):
            from importlib.util import spec_from_file_location
            if name == "course_pkg":
                return spec_from_file_location(name, f"{mapped}/__init__.py", submodule_search_locations=[mapped])
            return None

    class Broken:
        pass

    meta_path = [Broken, EditableFinder, *sys.meta_path]
    assert package_folders("course_pkg", path=[], meta_path=meta_path) == [mapped]


def test_the_courses_own_copy_is_not_an_other_copy(tmp_path, monkeypatch):
    own, installed = _package(tmp_path / "course", "grading"), _package(tmp_path / "site", "grading")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "course"), str(tmp_path / "site")])
    others = other_copies("grading", str(tmp_path / "course"))  # and this checkout's, where installed editable
    assert installed in others and own not in others
