"""Interactive dashboards (ipywidgets 8) over the course's models: move a slider, see the effect.

Each function returns a ``VBox`` subclass to display in a notebook. Its ``controls`` dict
holds the input widgets by name, ``readout`` (an ``HTML`` widget) the numbers in words and,
where there is a picture, ``image`` (an ``Image`` widget) the figure from ``labutils.plots``
as PNG (rendered without pyplot, so no global figure state and no Output widget). Nothing is
computed here: the numbers come from ``labutils.costmodel.schedules``, ``labutils.costmodel``,
``labutils.costmodel.strategy``, ``labutils.costmodel.roofline`` and ``labutils.machine.topology``. ``figure_explorer`` turns
any function that returns a figure into such a dashboard.

    from labutils import widgets
    explorer = widgets.pipeline_explorer()
    explorer                                  # the dashboard
    explorer.controls["m"].value = 16         # the chart and the readout follow

GPU memory capacities are ``labutils.costmodel.roofline.DEVICES[...].memory_bytes`` (bytes: the
datasheet's "80 GB" is 80 GiB), shown both ways ("85.9 GB (80.0 GiB)"); GPUs listed there
without a capacity are left out of the menus.

Modules, each dashboard re-exported here: ``base`` (the shared ``Dashboard``), ``collectives``,
``figures``, ``memory``, ``pipeline``, ``strategy``, ``topology``.
"""
from labutils.widgets.base import gpu_memory_options
from labutils.widgets.collectives import AllReduceExplorer, allreduce_explorer
from labutils.widgets.figures import FigureExplorer, figure_explorer
from labutils.widgets.memory import ZeroCalculator, zero_calculator
from labutils.widgets.pipeline import PipelineExplorer, pipeline_explorer
from labutils.widgets.strategy import StrategyChooser, strategy_chooser
from labutils.widgets.topology import TopologyExplorer, topology_explorer

__all__ = ["AllReduceExplorer", "FigureExplorer", "PipelineExplorer", "StrategyChooser", "TopologyExplorer",
           "ZeroCalculator", "allreduce_explorer", "figure_explorer", "gpu_memory_options", "pipeline_explorer",
           "strategy_chooser", "topology_explorer", "zero_calculator"]
