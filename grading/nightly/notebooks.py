"""Which notebooks the nightly run executes: discovery in a course folder and the names a user types.

    select_notebooks(root, ["03_roofline", "lab01_tensor_parallel"])   # -> [NotebookJob, ...]
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class NightlyInputError(ValueError):
    """A mistake in what the nightly run was asked to do (unknown notebook, kernel, output folder)."""


@dataclass(frozen=True)
class NotebookJob:
    """One notebook to execute: ``name`` is its path relative to the course root (the report's key),
    ``group`` "chapters", "solutions" or "other", ``output`` where the executed copy goes inside the run folder."""

    path: Path
    name: str
    group: str
    output: Path


def discover_notebooks(root: Path) -> list[NotebookJob]:
    """``root/notebooks/*.ipynb`` then ``root/solutions/lab*/*.ipynb``, each sorted by name."""
    root = Path(root).resolve()
    paths = sorted((root / "notebooks").glob("*.ipynb")) + sorted((root / "solutions").glob("lab*/*.ipynb"))
    return [_job(path, root) for path in paths if not path.name.startswith(".")]


def _job(path: Path, root: Path) -> NotebookJob:
    path = path.resolve()
    try:
        relative = path.relative_to(root)
    except ValueError:
        return NotebookJob(path, str(path), "other", Path("other") / path.name)
    group = {"notebooks": "chapters", "solutions": "solutions"}.get(relative.parts[0], "other")
    return NotebookJob(path, relative.as_posix(), group, relative)


def _short_names(jobs: list[NotebookJob]) -> list[str]:
    """What a user can type to pick a notebook: a chapter's stem, a lab's folder name."""
    names = []
    for job in jobs:
        short = job.path.stem if job.group == "chapters" else job.path.parent.name
        if short not in names:
            names.append(short)
    return names


def select_notebooks(root: Path, names: list[str]) -> list[NotebookJob]:
    """The notebooks ``names`` pick (all when empty), in discovery order, each once.

    A name is a chapter's stem (``03_roofline``), a lab folder (``lab01_tensor_parallel``), a notebook's
    path relative to ``root`` with or without ``.ipynb``, or the path of any ``.ipynb`` file or folder.
    """
    root = Path(root).resolve()
    available = discover_notebooks(root)
    if not names:
        return available
    chosen: list[NotebookJob] = []
    for name in names:
        matches = [job for job in available if name in _keys(job)]
        candidate = Path(name)
        if not matches and candidate.is_file() and candidate.suffix == ".ipynb":
            matches = [_job(candidate, root)]
        elif not matches and candidate.is_dir():
            matches = [_job(path, root) for path in sorted(candidate.glob("*.ipynb"))]
        if not matches:
            listing = ", ".join(_short_names(available)) or f"none (no notebooks under {root})"
            raise NightlyInputError(f"unknown notebook {name!r}: give a name, a path or a lab folder; "
                                    f"available: {listing}")
        chosen.extend(job for job in matches if job not in chosen)
    return _unique_outputs(chosen)


def _keys(job: NotebookJob) -> set[str]:
    keys = {job.path.stem, job.name, job.name.removesuffix(".ipynb")}
    if job.group == "solutions":
        keys.add(job.path.parent.name)
    return keys


def _unique_outputs(jobs: list[NotebookJob]) -> list[NotebookJob]:
    """Give two notebooks from outside the course with the same file name distinct output paths."""
    used, unique = set(), []
    for job in jobs:
        output, counter = job.output, 2
        while output in used:
            output = job.output.with_name(f"{job.output.stem}_{counter}{job.output.suffix}")
            counter += 1
        used.add(output)
        unique.append(NotebookJob(job.path, job.name, job.group, output))
    return unique
