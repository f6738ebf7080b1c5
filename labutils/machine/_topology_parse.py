"""Read the matrix that ``nvidia-smi topo -m`` prints (the link types are in ``_topology_links``).

The names here are re-exported by :mod:`labutils.machine.topology`, which notebooks import; see its
docstring for the link types and what the parser copes with.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from labutils.machine._topology_links import LINK_TOKEN, link_rank
from labutils.machine._topology_summary import summarize

#: the columns nvidia-smi may print after the matrix, in the order it prints them
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_AFFINITY_HEADER = re.compile("|".join(re.escape(name) for name in AFFINITY_COLUMNS))
_GPU_NAME = re.compile(r"GPU\d+")
_NIC_LEGEND_LINE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$", re.MULTILINE)
_TAB_WIDTH = 8  # columns per tab stop, where a paste turned nvidia-smi's tabs into spaces


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """Expand a Linux CPU list: ``"0-3,8"`` -> ``(0, 1, 2, 3, 8)``; ``"6,14,22,30"`` stays as is.

    This is the format of ``nvidia-smi``'s "CPU Affinity" and of sysfs ``cpulist`` files.
    Blank text gives ``()``.
    """
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"{text!r} is not a CPU list: expected items like 4 or 0-31, separated by commas")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if last < first:
            raise ValueError(f"{text!r} is not a CPU list: range {part} runs backwards")
        cpus.extend(range(first, last + 1))
    return tuple(cpus)


def format_cpu_list(cpus) -> str:
    """The inverse of :func:`parse_cpu_list`: ``(0, 1, 2, 3, 8)`` -> ``"0-3,8"``."""
    ordered = sorted(set(int(cpu) for cpu in cpus))
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        parts.append(str(ordered[index]) if end == index else f"{ordered[index]}-{ordered[end]}")
        index = end + 1
    return ",".join(parts)


@dataclass(frozen=True)
class GpuAffinity:
    """The affinity cells of one GPU row, as printed; ``None`` where blank, "N/A" or not printed.

    ``cpu_affinity`` is a CPU list ("0-31,64-95"), ``numa_affinity`` the NUMA node(s) of
    the CPUs close to the GPU, ``gpu_numa_id`` the NUMA node of the GPU's own memory (set
    on systems such as Grace Hopper, where GPU memory is a NUMA node).
    """

    cpu_affinity: str | None = None
    numa_affinity: str | None = None
    gpu_numa_id: str | None = None

    @property
    def cpus(self) -> tuple[int, ...]:
        """The CPU numbers of ``cpu_affinity`` (``()`` when it was blank)."""
        return parse_cpu_list(self.cpu_affinity) if self.cpu_affinity else ()


@dataclass(frozen=True)
class Topology:
    """A parsed ``nvidia-smi topo -m``.

    ``devices``: names in printed order (GPUs first, then NICs: "NIC0" or "mlx5_0").
    ``links[i][j]``: link type between ``devices[i]`` and ``devices[j]`` ("X" on the
    diagonal, "NV12" kept with its count). ``affinity``: per GPU name. ``affinity_columns``:
    which of :data:`AFFINITY_COLUMNS` were printed. ``nic_names``: the NIC Legend
    ("NIC0" -> "mlx5_0"), empty when absent or cut off.
    """

    devices: tuple[str, ...]
    links: tuple[tuple[str, ...], ...]
    affinity: dict[str, GpuAffinity] = field(default_factory=dict)
    affinity_columns: tuple[str, ...] = ()
    nic_names: dict[str, str] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        """GPU names ("GPU0", ...), in printed order."""
        return tuple(name for name in self.devices if _GPU_NAME.fullmatch(name))

    @property
    def nics(self) -> tuple[str, ...]:
        """NIC names ("NIC0" or "mlx5_0", ...), in printed order."""
        return tuple(name for name in self.devices if not _GPU_NAME.fullmatch(name))

    def link(self, a: str, b: str) -> str:
        """Link type between devices ``a`` and ``b`` (e.g. ``link("GPU0", "NIC1") == "PIX"``)."""
        for name in (a, b):
            if name not in self.devices:
                raise ValueError(f"no device {name!r} in this topology: it has {', '.join(self.devices)}")
        return self.links[self.devices.index(a)][self.devices.index(b)]

    def gpu_pairs_by_link(self) -> dict[str, list[tuple[str, str]]]:
        """GPU pairs (i < j, printed order) grouped by link type, fastest type first."""
        gpus = self.gpus
        grouped: dict[str, list[tuple[str, str]]] = {}
        for i, a in enumerate(gpus):
            for b in gpus[i + 1 :]:
                grouped.setdefault(self.link(a, b), []).append((a, b))
        return dict(sorted(grouped.items(), key=lambda item: link_rank(item[0])))

    def nic_label(self, nic: str) -> str:
        """``"NIC0 (mlx5_0)"`` when the NIC Legend names it, else the name as printed."""
        return f"{nic} ({self.nic_names[nic]})" if nic in self.nic_names else nic

    def summary(self, cuda_ordinals: dict[str, int | None] | None = None) -> str:
        """Plain-words description, one finding per line (see :func:`labutils.machine.topology.summarize`;
        ``cuda_ordinals`` maps "GPU4" to its CUDA ordinal here, to mark the GPUs ranks use)."""
        return "\n".join(summarize(self, cuda_ordinals))

    def __str__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        header = "".join(f"<th>{html.escape(name)}</th>" for name in self.devices)
        rows = []
        for name, row in zip(self.devices, self.links):
            cells = "".join(f"<td>{html.escape(link)}</td>" for link in row)
            rows.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
        return (
            f"<table><tr><th></th>{header}</tr>{''.join(rows)}</table>"
            f"<pre>{html.escape(self.summary())}</pre>"
        )


# ----------------------------------------------------------------------------- parsing


def parse_topology(text: str) -> Topology:
    """Parse the text of ``nvidia-smi topo -m`` (or ``topo --matrix``) into a :class:`Topology`.

    Raises ``ValueError`` saying what is wrong when the text holds no complete matrix
    (empty, garbage, rows cut off, an unknown link type, an asymmetric matrix).
    """
    if not isinstance(text, str):
        raise ValueError(f"expected the text printed by `nvidia-smi topo -m`, got {type(text).__name__}")
    lines = _ANSI_ESCAPE.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if not any(line.strip() for line in lines):
        raise ValueError("empty text: pass the output of `nvidia-smi topo -m`")
    header_index, devices, columns = _find_header(lines)
    rows, end_index = _read_rows(lines, header_index + 1, devices, columns)
    links = tuple(rows[name][0] for name in devices)
    _check_matrix(devices, links)
    affinity = {name: rows[name][1] for name in devices if _GPU_NAME.fullmatch(name)}
    legend = {
        nic: mlx for nic, mlx in _NIC_LEGEND_LINE.findall("\n".join(lines[end_index:])) if nic in devices
    }
    return Topology(tuple(devices), links, affinity, columns, legend)


def _header_parts(line: str) -> tuple[list[str], tuple[str, ...]]:
    """Device names and affinity column names of a candidate header line."""
    first_column = _AFFINITY_HEADER.search(line)
    device_text = line[: first_column.start()] if first_column else line
    return device_text.split(), tuple(_AFFINITY_HEADER.findall(line))


def _find_header(lines: list[str]) -> tuple[int, list[str], tuple[str, ...]]:
    """The header is the line naming the devices, followed by a row starting with the first of them."""
    for index, line in enumerate(lines):
        devices, columns = _header_parts(line)
        if not devices or any(LINK_TOKEN.fullmatch(name) for name in devices):
            continue
        following = next((later for later in lines[index + 1 :] if later.strip()), "")
        tokens = following.split()
        if len(tokens) >= 2 and tokens[0] == devices[0] and LINK_TOKEN.fullmatch(tokens[1]):
            if len(set(devices)) != len(devices):
                raise ValueError(f"the header names a device twice: {' '.join(devices)}")
            return index, devices, columns
    raise ValueError(
        "no `nvidia-smi topo -m` matrix found: expected a header line of device names "
        "(GPU0 GPU1 ...) followed by one row per device (GPU0  X  NV12 ...)"
    )


def _read_rows(lines, start, devices, columns):
    """Rows after the header: ``{name: (link cells, GpuAffinity)}`` and the index after the last."""
    rows: dict[str, tuple[tuple[str, ...], GpuAffinity]] = {}
    index = start
    while index < len(lines) and len(rows) < len(devices):
        line = lines[index]
        tokens = line.split()
        if not tokens:
            index += 1
            continue
        if tokens[0] not in devices or tokens[0] in rows:
            break
        cells = _row_cells(line, len(devices))
        name, link_cells, extra = cells[0], cells[1 : 1 + len(devices)], cells[1 + len(devices) :]
        if len(link_cells) < len(devices):
            raise ValueError(
                f"row {name} has {len(link_cells)} link cells, the header names {len(devices)} devices"
            )
        for cell in link_cells:
            if not LINK_TOKEN.fullmatch(cell):
                raise ValueError(
                    f"row {name}: {cell!r} is not a link type (X, NV#, PIX, PXB, PHB, NODE, SYS)"
                )
        links = tuple("SYS" if cell == "SOC" else cell for cell in link_cells)
        rows[name] = (links, _affinity(extra, columns))
        index += 1
    missing = [name for name in devices if name not in rows]
    if missing:
        raise ValueError(
            f"no row for {', '.join(missing)}: the matrix looks cut off; paste the whole output"
        )
    return rows, index


def _row_cells(line: str, device_count: int) -> list[str]:
    """Cells of one matrix row: the device name, its link cells, then its affinity cells.

    With tabs, each tab ends a cell (nvidia-smi prints blank cells as empty). Where a paste
    turned tabs into spaces, the tabs are recovered from the 8-column tab stops, so blank
    cells survive; if that does not give clean link cells, cells are split on whitespace.
    """
    if "\t" in line:
        return [cell.strip() for cell in line.strip(" ").split("\t")]
    tokens = list(re.finditer(r"\S+", line))
    cells = [tokens[0].group()]
    for previous, token in zip(tokens, tokens[1:]):
        stops_crossed = token.start() // _TAB_WIDTH - previous.end() // _TAB_WIDTH
        cells.extend([""] * (max(stops_crossed, 1) - 1))
        cells.append(token.group())
    link_cells = cells[1 : 1 + device_count]
    if len(link_cells) == device_count and all(LINK_TOKEN.fullmatch(cell) for cell in link_cells):
        return cells
    return [token.group() for token in tokens]


def _affinity(cells: list[str], columns: tuple[str, ...]) -> GpuAffinity:
    """Assign the cells after the links to the printed affinity columns.

    nvidia-smi follows the "NUMA Affinity" value with two tabs, so the last column
    ("GPU NUMA ID" when printed) is read from the end and the others from the start.
    """
    values: dict[str, str] = {}
    if columns:
        for position, column in enumerate(columns[:-1]):
            values[column] = cells[position] if position < len(cells) else ""
        values[columns[-1]] = cells[-1] if len(cells) >= len(columns) else ""

    def cell(column: str) -> str | None:
        value = values.get(column, "").strip()
        return None if value in ("", "N/A") else value

    return GpuAffinity(cell("CPU Affinity"), cell("NUMA Affinity"), cell("GPU NUMA ID"))


def _check_matrix(devices, links) -> None:
    for i, a in enumerate(devices):
        for j, b in enumerate(devices):
            if (i == j) != (links[i][j] == "X"):
                raise ValueError(f"cell {a}/{b} is {links[i][j]!r}: X (self) belongs on the diagonal and only there")
            if links[i][j] != links[j][i]:
                raise ValueError(
                    f"the matrix is not symmetric: {a}->{b} is {links[i][j]} but {b}->{a} is {links[j][i]}"
                )
