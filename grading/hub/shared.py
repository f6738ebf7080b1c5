"""What every account of the hub reads: the students' copy and an environment made from it.

Under the settings' ``shared`` folder (world-readable, written by root only):

- ``course/``: what ``course student`` builds (chapters, released labs, labutils; no solution,
  no hidden test, no grader), rebuilt at every start;
- ``venv/``: a virtual environment made with the settings' ``python``, with ``labutils``
  installed from ``course/`` (not editable: it reads nothing of the checkout) and JupyterLab,
  nbgrader, JupyterHub's single-user server and batchspawner's (a server as a Slurm job); reinstalled only when the copy's package
  changed (``venv/.installed`` holds the digest it was made from);
- ``config/student_config`` and ``config/instructor_config``: each role's Jupyter configuration.

Every server, students' and instructors', runs this environment's Python; the hub itself runs
from the course's own environment, as root.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from grading.student_copy import build_student_copy

HUB_DIR = Path(__file__).resolve().parent
ROLES = ("student", "instructor")


def python(shared: Path) -> Path:
    return Path(shared) / "venv" / "bin" / "python"


def jupyter_config_path(shared: Path, role: str) -> str:
    """``JUPYTER_CONFIG_PATH`` of a server: the role's own folder first, then the course's
    (``labutils/data/jupyter`` of the students' copy: Validate, the Check my lab button)."""
    return os.pathsep.join([str(Path(shared) / "config" / f"{role}_config"),
                            str(Path(shared) / "course" / "labutils" / "data" / "jupyter")])


def package_digest(copy: Path) -> str:
    """Digest of what the environment installs from the copy: its pyproject.toml and labutils."""
    digest = hashlib.sha256()
    files = [copy / "pyproject.toml", *sorted(p for p in (copy / "labutils").rglob("*") if p.is_file())]
    for path in files:
        digest.update(str(path.relative_to(copy)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def torch_pin(copy: Path) -> str:
    """The exact torch requirement of the copy's pyproject.toml (installed first, as `make` does)."""
    found = re.search(r'"(torch==[^"]+)"', (copy / "pyproject.toml").read_text())
    if not found:
        raise RuntimeError(f"{copy / 'pyproject.toml'} pins no torch version")
    return found.group(1)


def prepare(shared: Path, system_python: str) -> list[str]:
    """Build the copy, the configuration folders and (when the copy's package changed) the
    environment under ``shared``; one line per thing made."""
    shared = Path(shared)
    shared.mkdir(parents=True, exist_ok=True)
    os.chmod(shared, 0o755)
    copy = build_student_copy(shared / "course")
    for role in ROLES:
        target = shared / "config" / f"{role}_config"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(HUB_DIR / f"{role}_config", target)
    done = [f"the students' copy in {copy}"]
    stamp = shared / "venv" / ".installed"
    digest = package_digest(copy)
    if stamp.exists() and stamp.read_text().strip() == digest:
        _refuse_outside_code(shared / "venv")
        return done
    if not python(shared).exists():
        subprocess.run([system_python, "-m", "venv", str(shared / "venv")], check=True)
    pip = [str(python(shared)), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [torch_pin(copy)], check=True)
    subprocess.run(pip + [f"{copy}[course,hub,slurm]"], check=True, cwd=shared)  # slurm: batchspawner, for spawner = "slurm"
    subprocess.run(pip + ["--force-reinstall", "--no-deps", str(copy)], check=True, cwd=shared)
    _refuse_outside_code(shared / "venv")
    stamp.write_text(digest + "\n")
    return done + [f"the students' environment in {shared / 'venv'} (labutils from the copy, not editable)"]


def outside_code(venv: Path) -> list[str]:
    """What in the environment ``venv`` (the servers', or the hub's own) would import code from
    outside it: editable installs (pip's ``direct_url.json`` says so; setuptools' ``__editable__`` finders) and ``.pth``
    lines naming a folder outside the environment (a course checkout's ``grading/`` and
    ``solutions/`` must never be one import away from a student's server)."""
    venv = Path(venv).resolve()
    found = []
    for site in venv.glob("lib/python*/site-packages"):
        for record in site.glob("*.dist-info/direct_url.json"):
            if json.loads(record.read_text()).get("dir_info", {}).get("editable"):
                found.append(f"{record.parent.name} is installed editable")
        found += [f"{finder.name} maps imports outside the environment" for finder in site.glob("__editable__*")]
        for pth in site.glob("*.pth"):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ")) and not Path(line).resolve().is_relative_to(venv):
                    found.append(f"{pth.name} adds {line} to the module path")
    return found


def _refuse_outside_code(venv: Path) -> None:
    found = outside_code(venv)
    if found:
        raise ValueError(f"the students' environment {venv} reaches code outside it: " + "; ".join(found))
