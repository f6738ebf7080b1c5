"""A parallel layout for a model on a cluster (``strategy_chooser``)."""
from __future__ import annotations

import html

import ipywidgets as widgets

from labutils.machine import interconnects
from labutils.widgets.base import WIDE, Dashboard, check_choice, gpu_dropdown, memory_of, params_slider, powers_of_two_slider

_INTRA_NODE_LINKS = [("NVLink", "nvlink"), ("PCIe only", "pcie")]  # labutils.costmodel.strategy.INTRA_NODE_LINKS
#: inter-node links per GPU, per direction: Gb/s / 8 bits per byte (labutils.machine.interconnects, after the
#: InfiniBand Trade Association's port speeds)
_INTER_NODE_LINKS = [(f"{link.label}, {link.rate_text.split(' per ')[0]} = {link.per_direction_GBps:g} GB/s",
                      link.per_direction_GBps) for link in map(interconnects.link, ("ib_hdr", "ib_ndr"))]


class StrategyChooser(Dashboard):
    """Model size, GPUs per node, nodes, links and GPU -> suggested TP x PP x DP, ZeRO stage, reasons."""

    def __init__(self, num_params: float, gpus_per_node: int, num_nodes: int, intra_node: str,
                 inter_node_GBps: float, gpu: str):
        check_choice("gpus_per_node", gpus_per_node, (1, 2, 4, 8))
        check_choice("intra_node", intra_node, [value for _, value in _INTRA_NODE_LINKS])
        check_choice("inter_node_GBps", inter_node_GBps, [value for _, value in _INTER_NODE_LINKS])
        controls = {
            "params": params_slider(num_params),
            "gpus_per_node": widgets.Dropdown(options=[1, 2, 4, 8], value=gpus_per_node,
                                              description="GPUs per node", style=WIDE),
            "nodes": powers_of_two_slider("num_nodes", num_nodes, "nodes"),
            "intra_node": widgets.Dropdown(options=_INTRA_NODE_LINKS, value=intra_node, description="inside a node", style=WIDE),
            "inter_node_GBps": widgets.Dropdown(options=_INTER_NODE_LINKS, value=inter_node_GBps,
                                                description="between nodes, per GPU", style=WIDE),
            "gpu": gpu_dropdown(gpu),
        }
        self.suggestion = None
        super().__init__(controls, with_image=False)

    def _redraw(self) -> None:
        from labutils.costmodel import strategy
        from labutils.costmodel.roofline import DEVICES

        c = {name: control.value for name, control in self.controls.items()}
        device = DEVICES[c["gpu"]]
        num_gpus = c["gpus_per_node"] * c["nodes"]
        self.suggestion = strategy.suggest(
            c["params"], num_gpus, c["gpus_per_node"], device.memory_bytes,
            intra_node=c["intra_node"], inter_node_GBps=c["inter_node_GBps"])
        s = self.suggestion
        verdict = "fits" if s.fits else "does NOT fit"
        reasons = "".join(f"<li>{html.escape(reason)}</li>" for reason in s.reasons)
        self.readout.value = (
            f"<b>TP = {s.tp} x PP = {s.pp} x DP = {s.dp}, ZeRO stage {s.zero_stage}</b> on "
            f"{num_gpus} {html.escape(device.name)} GPU{'' if num_gpus == 1 else 's'}: "
            f"{memory_of(s.memory_per_gpu_bytes, device)} per GPU, "
            f"{verdict}<ul>{reasons}</ul>"
        )


def strategy_chooser(num_params: float = 70e9, gpus_per_node: int = 8, num_nodes: int = 4,
                     intra_node: str = "nvlink", inter_node_GBps: float = 50.0,
                     gpu: str = "h100") -> StrategyChooser:
    """Dashboard over ``labutils.costmodel.strategy.suggest``: a parallel layout for a model on a cluster.

    Controls: "params", "gpus_per_node", "nodes", "intra_node" (NVLink or PCIe),
    "inter_node_GBps" (InfiniBand per GPU, per direction), "gpu". ``.readout`` shows the
    suggested tensor- (TP), pipeline- (PP) and data-parallel (DP) degrees, the ZeRO stage,
    the memory per GPU and the reasons; ``.suggestion`` is the ``Suggestion`` itself.
    """
    return StrategyChooser(num_params, gpus_per_node, num_nodes, intra_node, inter_node_GBps, gpu)
