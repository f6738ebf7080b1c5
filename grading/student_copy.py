"""The students' copy of the course: what a student receives, and proof that nothing leaks.

    course student                          # writes build/student/
    course student --archive                # and build/multigpu-course-student.tar.gz

The copy holds the chapters (``notebooks/``), the released labs (``labs/``), the helper
package (``labutils/``), ``environment.yml``, a ``pyproject.toml`` that installs labutils
alone, and the students' ``Makefile`` and ``README.md`` (from ``grading/student/``). It
holds no lab solution, no hidden test, no reference kernel and no instructors' tool:
:func:`find_leaks` checks every file of the copy against the text of ``solutions/`` and
``grading/`` and fails the build when anything of theirs is in it.
"""
from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import tarfile
import tomllib
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "student"
#: Folders copied whole (``__pycache__`` and checkpoints left out).
COPIED_FOLDERS = ("notebooks", "labs", "labutils")
#: Names that never belong in a student's copy, at any depth.
FORBIDDEN_NAMES = ("solutions", "grading", "gradebook.db")
#: Lines of solutions and reference code shorter than this (stripped) are too generic to
#: count as a leak (``return out``, ``### END SOLUTION``).
MIN_LEAK_LINE_CHARS = 30
#: Consecutive secret lines that make a leak: a pasted solution, hidden test or kernel.
LEAK_RUN_LINES = 3
_REGION = re.compile(r"### BEGIN (SOLUTION|HIDDEN TESTS)\n(.*?)### END \1", re.S)
#: File that marks a folder as a students' copy (so a rebuild may replace it).
MARKER = ".students-copy"
_IGNORED = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.pyc")


class LeakError(RuntimeError):
    """The students' copy holds instructors' material; the message lists where."""


def replace_marked_folder(out_dir: Path, marker: str, what: str, command: str, error: type = ValueError) -> None:
    """Make ``out_dir`` an empty folder for a new build of ``what`` ("a students' copy"), marked by
    the file ``marker`` as written by ``command``. A folder that holds anything and no ``marker``
    is refused with ``error``: a rebuild deletes only what an earlier build wrote."""
    if out_dir.exists() and any(out_dir.iterdir()) and not (out_dir / marker).exists():
        raise error(f"{out_dir} exists and is not {what}: choose an empty or new folder")
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    (out_dir / marker).write_text(f"{what[0].upper()}{what[1:]}, written by `{command}`.\n")


def build_student_copy(out_dir: Path, course_root: Path = COURSE_ROOT) -> Path:
    """Write the students' copy to ``out_dir`` (replaced if present), check it, return it."""
    out_dir = Path(out_dir).resolve()
    if course_root.resolve() in (out_dir, *out_dir.parents) and "build" not in out_dir.parts:
        raise ValueError(f"{out_dir} is inside the course but not under build/: choose a folder under build/")
    replace_marked_folder(out_dir, MARKER, "a students' copy", "course student")
    for folder in COPIED_FOLDERS:
        shutil.copytree(course_root / folder, out_dir / folder, ignore=_IGNORED)
    shutil.copy2(course_root / "environment.yml", out_dir / "environment.yml")
    shutil.copy2(TEMPLATES / "Makefile", out_dir / "Makefile")
    shutil.copy2(TEMPLATES / "README.md", out_dir / "README.md")
    (out_dir / "pyproject.toml").write_text(student_pyproject((course_root / "pyproject.toml").read_text()))
    strip_outputs(out_dir)
    leaks = find_leaks(out_dir, course_root) + missing_imports(out_dir)
    if leaks:
        hint = [WORKED_LAB_HINT] if any(leak.startswith("labs/") for leak in leaks) else []
        raise LeakError("the students' copy is not clean:\n  " + "\n  ".join(leaks + hint))
    return out_dir


#: What to do when labs/ of the checkout holds a student's work (a lab tried in place).
WORKED_LAB_HINT = ("labs/ is not the release: a lab was worked on in this checkout. Keep that work "
                   "elsewhere (cp -r labs/LAB ~/LAB-mine), restore the release (git checkout -- labs/, "
                   "or course release --all), then build the copy again")


def strip_outputs(copy_dir: Path) -> list[Path]:
    """Clear the outputs and execution counts of every notebook of the copy (a chapter run in the
    checkout ships as committed: without outputs); the notebooks changed."""
    changed = []
    for notebook in sorted(copy_dir.rglob("*.ipynb")):
        content = json.loads(notebook.read_text())
        cells = [c for c in content["cells"] if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))]
        for cell in cells:
            cell["outputs"], cell["execution_count"] = [], None
        if cells:
            notebook.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n")
            changed.append(notebook)
    return changed


def student_pyproject(text: str) -> str:
    """The course's pyproject.toml with the grading package and the ``course`` command removed."""
    lines, section = [], ""
    for line in text.splitlines():
        header = re.match(r"\s*\[([^\]]+)\]\s*$", line)
        section = header.group(1) if header else section
        if section in ("project.scripts", "tool.setuptools.package-data") and re.match(r"\s*(course|grading)\s*=", line):
            continue
        if section == "tool.setuptools.packages.find" and re.match(r"\s*include\s*=", line):
            line = 'include = ["labutils*"]'
        lines.append(line)
    result = "\n".join(lines) + "\n"
    parsed = tomllib.loads(result)
    packages = parsed["tool"]["setuptools"]["packages"]["find"]["include"]
    scripts = parsed["project"].get("scripts", {})
    if packages != ["labutils*"] or any(not target.startswith("labutils") for target in scripts.values()):
        raise LeakError(f"could not reduce pyproject.toml to labutils alone (packages {packages}, scripts {scripts})")
    return result


def secret_lines(course_root: Path = COURSE_ROOT) -> dict[str, str]:
    """{stripped line: where it comes from} for what a student must not see: the solution and
    hidden-test regions of ``solutions/``, and the lines of the ``grading`` package's code
    that the labs do not already give (a lab's worked example may equal a reference kernel)."""
    secrets: dict[str, str] = {}
    given: set[str] = set()
    for notebook in sorted((course_root / "solutions").rglob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            source = "".join(cell["source"])
            for kind, body in _REGION.findall(source):
                for line in body.splitlines():
                    _remember(secrets, line, f"{notebook.relative_to(course_root)} ({kind.lower()})")
            given.update(line.strip() for line in _REGION.sub("", source).splitlines())
    for module in sorted((course_root / "grading").rglob("*.py")):
        for line in module.read_text().splitlines():
            if line.strip() not in given:
                _remember(secrets, line, str(module.relative_to(course_root)))
    return secrets


def _remember(secrets: dict[str, str], line: str, origin: str) -> None:
    text = line.strip()
    if len(text) >= MIN_LEAK_LINE_CHARS and not text.startswith(("#", '"""', "import ", "from ")):
        secrets.setdefault(text, origin)


def find_leaks(copy_dir: Path, course_root: Path = COURSE_ROOT) -> list[str]:
    """One line per leak: a forbidden file name, a solution or hidden-test marker, or a run of
    lines of a solution, a hidden test or the grading package found in a file of the copy."""
    secrets = secret_lines(course_root)
    leaks = []
    for path in sorted(p for p in copy_dir.rglob("*")):
        where = path.relative_to(copy_dir)
        if any(part in FORBIDDEN_NAMES for part in where.parts):
            leaks.append(f"{where}: instructors' file")
            continue
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if path.suffix == ".ipynb":
            text = "\n".join("".join(cell["source"]) for cell in json.loads(text)["cells"])
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "grading.judge", "grading.reference"):
            if marker in text:
                leaks.append(f"{where}: contains {marker!r}")
        leaks += [f"{where}: {len(run)} lines of {secrets[run[0]]}, from: {run[0][:70]}"
                  for run in _secret_runs(text, secrets)]
    return leaks


def _secret_runs(text: str, secrets: dict[str, str]) -> list[list[str]]:
    """Runs of at least LEAK_RUN_LINES consecutive long lines that are all secret (short lines
    are skipped: they neither count nor break a run); single common lines are not leaks."""
    runs, current = [], []
    for line in (raw.strip() for raw in text.splitlines()):
        if len(line) < MIN_LEAK_LINE_CHARS or line.startswith("#"):
            continue
        if line in secrets:
            current.append(line)
            continue
        if len(current) >= LEAK_RUN_LINES:
            runs.append(current)
        current = []
    if len(current) >= LEAK_RUN_LINES:
        runs.append(current)
    return runs


def missing_imports(copy_dir: Path) -> list[str]:
    """Modules the copy's notebooks import from the course that the copy does not hold."""
    problems = []
    for notebook in sorted(copy_dir.rglob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for module in _course_imports("".join(cell["source"])):
                parts = module.split(".")
                if parts[0] != "labutils":
                    problems.append(f"{notebook.relative_to(copy_dir)}: imports {module}, not in the students' copy")
                elif not _module_exists(copy_dir, parts):
                    problems.append(f"{notebook.relative_to(copy_dir)}: imports {module}, missing from labutils/")
    return problems


def _course_imports(source: str) -> list[str]:
    """Modules of this course (labutils, grading) that a cell's code imports."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return [name for name in names if name.split(".")[0] in ("labutils", "grading")]


def _module_exists(copy_dir: Path, parts: list[str]) -> bool:
    """True when parts name a package, a module, or a name inside an existing module."""
    path = copy_dir.joinpath(*parts)
    if path.is_dir() or path.with_suffix(".py").is_file():
        return True
    parent = copy_dir.joinpath(*parts[:-1])
    return len(parts) > 1 and (parent.is_dir() or parent.with_suffix(".py").is_file())


def write_archive(copy_dir: Path, archive: Path) -> Path:
    """The copy as a .tar.gz whose single top folder is ``multigpu-course``."""
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(copy_dir, arcname="multigpu-course")
    return archive


def add_arguments(parser) -> None:
    parser.add_argument("--out", type=Path, default=COURSE_ROOT / "build" / "student",
                        help="where to write the copy (default: build/student)")
    parser.add_argument("--archive", action="store_true",
                        help="also write multigpu-course-student.tar.gz next to the copy")


def main(args) -> int:
    try:
        copy_dir = build_student_copy(args.out)
    except (LeakError, ValueError) as error:
        print(f"course student: {error}", file=sys.stderr)
        return 1
    files = sum(1 for p in copy_dir.rglob("*") if p.is_file())
    print(f"students' copy: {copy_dir} ({files} files, no solution, hidden test or grader inside)")
    if args.archive:
        archive = write_archive(copy_dir, copy_dir.parent / "multigpu-course-student.tar.gz")
        print(f"archive: {archive} ({archive.stat().st_size / 1e6:.1f} MB)")
    return 0
