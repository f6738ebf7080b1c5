"""The requirement lines of the hub's own environment: the course's dependencies and those of the
named extras (``python grading/hub/requirements.py course hub slurm``), without the course itself.

`make hub` installs these into an environment of its own (``HUB_VENV``) and runs the hub there as
``python -E -s -m grading.hub`` from the checkout, as the judge runs: the checkout's ``grading``
and ``labutils`` come first on the module path from the working folder, and no copy of the course,
editable or not, is installed anywhere a server could run. Run as a script (it imports nothing of
the course, which its environment does not hold yet): only the standard library.
"""
from __future__ import annotations

import sys
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def requirement_lines(pyproject: Path, extras: list[str]) -> list[str]:
    """The project's dependencies, then each of ``extras``' that is not listed yet, in order.
    ValueError naming an extra the project does not define."""
    project = tomllib.loads(pyproject.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [name for name in extras if name not in optional]
    if unknown:
        raise ValueError(f"{pyproject} defines no extra {', '.join(unknown)} (it has {', '.join(optional)})")
    lines = list(project["dependencies"])
    for name in extras:
        lines += [line for line in optional[name] if line not in lines]
    return lines


def main(argv: list[str]) -> int:
    try:
        print("\n".join(requirement_lines(PYPROJECT, argv)))
    except ValueError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
