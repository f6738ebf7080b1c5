"""Twelve real ``nvidia-smi topo -m`` outputs shipped with labutils (package data in ``data/topo``)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from labutils.machine._topology_parse import Topology, parse_topology


_EXAMPLES_PACKAGE_PATH = ("data", "topo")


@dataclass(frozen=True)
class TopologyExample:
    """One real ``nvidia-smi topo -m`` output shipped with labutils.

    ``name``: the file's stem ("02_hgx_h100_8x_nv18_6nics_blank_cpu_affinity").
    ``text``: the output byte for byte as pasted (tabs, CRLF or ANSI codes kept: the
    parser copes with them). ``topology``: ``parse_topology(text)``. ``source``: where it
    was published (D = a documentation file at a commit, I = an issue or pull request).
    ``machine``: the GPUs as its source describes them. ``notes``: quirks of the paste.
    """

    name: str
    text: str
    topology: Topology
    source: str
    machine: str
    notes: str


def _examples_folder():
    from importlib.resources import files

    return files("labutils").joinpath(*_EXAMPLES_PACKAGE_PATH)


def _example_index() -> dict[str, dict[str, str]]:
    """INDEX.md's table, by file stem: source, machine (GPUs column) and notes."""
    index = {}
    for line in _examples_folder().joinpath("INDEX.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"\d+_\w+", cells[0]):
            index[cells[0]] = {"source": cells[1], "machine": cells[2], "notes": cells[5]}
    return index


def example_names() -> list[str]:
    """Stems of the shipped examples, in order ("01_dgx_a100_8x_nv12_mlx5x12", ...)."""
    return sorted(item.name[:-4] for item in _examples_folder().iterdir() if item.name.endswith(".txt"))


def example(name: str) -> TopologyExample:
    """The shipped example ``name``: its full stem or a unique start of it ("02", "05_dgx1")."""
    names = example_names()
    matches = [stem for stem in names if stem == name] or [stem for stem in names
                                                          if isinstance(name, str) and name and stem.startswith(name)]
    if len(matches) != 1:
        problem = "matches several" if matches else "matches no"
        raise ValueError(f"{name!r} {problem} shipped topology example: pass one of {', '.join(names)}")
    stem = matches[0]
    text = _examples_folder().joinpath(f"{stem}.txt").read_bytes().decode("utf-8")
    described = _example_index().get(stem, {})
    return TopologyExample(stem, text, parse_topology(text), described.get("source", ""),
                           described.get("machine", ""), described.get("notes", ""))


def examples() -> list[TopologyExample]:
    """Every shipped example, parsed, in order (twelve real outputs, 1 to 8 GPUs)."""
    return [example(stem) for stem in example_names()]
