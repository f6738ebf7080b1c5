"""Parsed ``nvidia-smi topo -m`` matrices, one at a time (``topology_explorer``)."""
from __future__ import annotations

import html

import ipywidgets as widgets

from labutils import plots
from labutils.widgets.base import Dashboard, check_choice


class TopologyExplorer(Dashboard):
    """A menu of ``nvidia-smi topo -m`` matrices -> the coloured matrix and what it says in words."""

    def __init__(self, topologies: dict, sources: dict | None, start: str | None):
        if not topologies:
            raise ValueError("no topologies to explore: pass {name: labutils.machine.topology.Topology}")
        for name, topo in topologies.items():
            if not hasattr(topo, "gpu_pairs_by_link"):
                raise ValueError(f"{name!r} is not a labutils.machine.topology.Topology")
        start = next(iter(topologies)) if start is None else start
        check_choice("start", start, list(topologies))
        self.topologies, self.sources = dict(topologies), dict(sources or {})
        controls = {"name": widgets.Dropdown(options=list(topologies), value=start, description="matrix",
                                             layout=widgets.Layout(width="60%"))}
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        name = self.controls["name"].value
        topo = self.topologies[name]
        self.image.value = plots.figure_png(plots.topology_matrices({name: topo}))
        pairs = "".join(f"<li>{html.escape(link)}: {len(found)} GPU pair(s)</li>"
                        for link, found in topo.gpu_pairs_by_link().items())
        source = f"<b>captured:</b> {html.escape(self.sources[name])}<br>" if name in self.sources else ""
        self.readout.value = f"{source}<pre>{html.escape(topo.summary())}</pre><ul>{pairs}</ul>"


def topology_explorer(topologies: dict, sources: dict | None = None, start: str | None = None) -> TopologyExplorer:
    """Dashboard over parsed ``nvidia-smi topo -m`` matrices (``labutils.machine.topology.Topology``).

    ``topologies``: name -> Topology; ``sources``: name -> where it was published (shown
    above the summary); ``start``: the name shown first. The control "name" picks a matrix;
    the picture is ``labutils.plots.topology_matrices`` and ``.readout`` its summary in words
    and the GPU pairs per link type.
    """
    return TopologyExplorer(topologies, sources, start)
