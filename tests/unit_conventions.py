"""Vendor memory totals quoted next to another total must say which bytes they count.

NVIDIA's datasheets write "GB" for GiB ($2^{30}$ B) when they give HBM capacity, and add
those up into system totals ("640 GB" for a DGX H100, "13.4 TB" for a GB200 NVL72); the
course counts bytes in SI (GB $= 10^9$ B). Put side by side without a word about it, 8 x 80
GB reads as 0.69 TB in one place and 640 GB in the other, and a computed total looks larger
or smaller than the vendor's for the wrong reason.

:func:`unlabelled_totals` reads text units (a markdown paragraph or list item, the strings of
one ``print`` call in a code cell, a README paragraph) that quote a vendor (:data:`VENDOR`),
speak of memory (:data:`MEMORY`) and state at least two capacities (:data:`CAPACITY`: a
number, or a computed ``{...}`` field, before GB, TB, PB, GiB or TiB, not a bandwidth): such
a unit must name its convention
(:data:`CONVENTION`: SI, GiB/TiB, $2^{30}$ or $10^9$ bytes, binary).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: Words that mark a figure as the vendor's.
VENDOR = re.compile(r"NVIDIA|\bAMD\b|Google|datasheet|data sheet|product page|user guide|\blists\b|marketed|vendor",
                    re.IGNORECASE)
#: Words that say the bytes are memory (a capacity), not a message or a file.
MEMORY = re.compile(r"HBM|memory|LPDDR|DRAM|capacity", re.IGNORECASE)
#: A memory capacity: a number (or an f-string field) and a unit of bytes that is not a rate.
CAPACITY = re.compile(r"(?:\d|\})\s*(?:[GTP]B|[GT]iB)(?![/\w])")
#: Words that name the convention of a byte count.
CONVENTION = re.compile(r"\bSI\b|\b[GT]iB\b|2\^\{?(?:30|40)\}?|2\*\*(?:30|40)|10\^\{?(?:9|12)\}?|\b1e(?:9|12)\b|binary",
                        re.IGNORECASE)
_BLOCK_END = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.)\s)")


@dataclass(frozen=True)
class Unlabelled:
    """A text unit that quotes a vendor's memory total beside another without naming the bytes."""

    where: str
    text: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text!r}"


def needs_convention(text: str) -> bool:
    """True when ``text`` quotes a vendor and two or more memory capacities but names no convention."""
    return (bool(VENDOR.search(text)) and bool(MEMORY.search(text)) and len(CAPACITY.findall(text)) >= 2
            and not CONVENTION.search(text))


def markdown_units(markdown: str) -> list[str]:
    """The paragraphs and list items of ``markdown``."""
    return [part for part in _BLOCK_END.split(markdown) if part.strip()]


def _strings(node: ast.AST) -> str:
    """The string constants under ``node`` in source order, an f-string's fields as ``{}``."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else ""
    if isinstance(node, ast.FormattedValue):
        return "{}"
    return "".join(_strings(child) for child in ast.iter_child_nodes(node))


def print_units(code: str) -> list[str]:
    """The joined string constants of each ``print(...)`` call of ``code`` (f-string fields as ``{}``)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:                                  # IPython magics: read the cell as one unit
        return [code]
    return [_strings(node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"]


def unlabelled_totals(name: str, cells: list[dict]) -> list[Unlabelled]:
    """The units of a notebook's ``cells`` that :func:`needs_convention` flags."""
    found = []
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        units = markdown_units(source) if cell["cell_type"] == "markdown" else print_units(source)
        found += [Unlabelled(f"{name}, cell {index}", " ".join(unit.split())) for unit in units
                  if needs_convention(unit)]
    return found
