"""Constructs in a submission that an instructor should look at: never a score change on its own.

    lines = suspicious_constructs(release_notebook, submitted_notebook)
    # ["cell f, line 3: importlib (reloads or loads modules by path)", ...]

Code a lab never needs and that the attacks on an autograder use: torch.distributed's internals
(around the communication trace), walking the interpreter's objects or stack frames (the inputs
of other ranks, the grader's frames), reloading modules, ctypes, detached processes, reading
paths outside the notebook's folder, sniffing the environment (behaving differently when graded),
changing how IPython reads cells. Cells the student left as released are not scanned; the ``.py``
files handed in beside the notebook are (``suspicious_helper_files``).
"""
from __future__ import annotations

import os
import re

#: (pattern, what it does) for each construct reported.
CONSTRUCTS = (
    (r"\bdistributed_c10d\b|\b_C\._distributed|ProcessGroup\w*\(", "torch.distributed's internals"),
    (r"\bgc\.get_(objects|referrers|referents)\b", "walks the interpreter's objects"),
    (r"\bsys\._getframe\b|\binspect\.(stack|currentframe|getouterframes)\b|\bf_back\b|\btb_frame\b|\bf_locals\b",
     "walks stack frames"),
    (r"\bimportlib\b|\bexec_module\b|\b__import__\b", "reloads or loads modules by path"),
    (r"\bsys\.modules\b|\bModuleType\b", "reads or writes the interpreter's module table (state kept out of sight?)"),
    (r"\bctypes\b|\bcffi\b", "calls C directly"),
    (r"\bsetsid\b|start_new_session|\bdaemon\s*=\s*True", "starts detached processes"),
    (r"\bos\.(fork|forkpty|posix_spawn|exec\w*|system|kill)\b|\bsubprocess\b", "starts or signals processes"),
    (r"\bmmap\b", "maps memory directly"),
    (r"\bmultiprocessing\b|\bSharedMemory\b", "shares memory or queues between processes"),
    (r"\bimport socket\b|\bsocket\.(socket|create_\w+|socketpair)\b|\bTCPStore\b|_get_default_store",
     "opens a channel of its own (sockets, the rendezvous store)"),
    (r"\bos\.environ\b|\bgetenv\b", "reads the environment (behaves differently when graded?)"),
    (r"(open|Path|listdir|scandir|walk|glob)\(\s*[frb]?[\"'](/|\.\.|~)|\.\./|[\"']\.\.[\"']|__file__|\bgrading\b(?!\.judge import judge)",
     "reads paths outside the notebook's folder or the grader's files"),
    (r"\binput_transformers\w*|\bevents\.register\b|\bregister_magic", "changes how IPython runs cells"),
)
_COMPILED = tuple((re.compile(pattern), what) for pattern, what in CONSTRUCTS)
#: Most lines reported per submission.
MAX_LINES = 20


def _cell_name(cell, index: int) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"#{index + 1}"


def scan_source(source: str) -> list:
    """[(line number from 1, the matched text, what it does)] of ``source``."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        for pattern, what in _COMPILED:
            match = pattern.search(line)
            if match:
                found.append((number, match.group(0).strip(), what))
    return found


def suspicious_constructs(release, submitted) -> list:
    """Report lines for the code cells of ``submitted`` (nbformat notebooks) that differ from the
    released cell of the same name, or that the student added."""
    released = {_cell_name(c, i): c.source for i, c in enumerate(release.cells) if c.cell_type == "code"}
    lines = []
    for index, cell in enumerate(submitted.cells):
        name = _cell_name(cell, index)
        if cell.cell_type != "code" or released.get(name) == cell.source:
            continue
        for number, text, what in scan_source(cell.source):
            lines.append(f"look at cell {name}, line {number}: {text[:60]} ({what})")
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES} more"]
    return lines


def suspicious_helper_files(folder: str, names: list) -> list:
    """Report lines for the ``.py`` files among ``names``, files handed in beside the notebooks in
    ``folder`` (their code runs in the kernel and, imported by a graded part, on the judge's ranks)."""
    lines = []
    for name in names:
        path = os.path.join(folder, name)
        if name.endswith(".py") and os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                lines += [f"look at {name}, line {number}: {text[:60]} ({what})"
                          for number, text, what in scan_source(f.read())]
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [f"... and {len(lines) - MAX_LINES} more"]
    return lines
