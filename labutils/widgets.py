"""Interactive dashboards (ipywidgets 8) over the course's models: move a slider, see the effect.

Each function returns a ``VBox`` subclass to display in a notebook. Its ``controls`` dict
holds the input widgets by name, ``readout`` (an ``HTML`` widget) the numbers in words and,
where there is a picture, ``image`` (an ``Image`` widget) the figure from ``labutils.plots``
as PNG (rendered without pyplot, so no global figure state and no Output widget). Nothing is
computed here: the numbers come from ``labutils.schedules``, ``labutils.costmodel``,
``labutils.strategy``, ``labutils.roofline`` and ``labutils.topology``. ``figure_explorer`` turns
any function that returns a figure into such a dashboard.

    from labutils import widgets
    explorer = widgets.pipeline_explorer()
    explorer                                  # the dashboard
    explorer.controls["m"].value = 16         # the chart and the readout follow

GPU memory capacities are ``labutils.roofline.DEVICES[...].memory_bytes`` (bytes: the
datasheet's "80 GB" is 80 GiB), shown both ways ("85.9 GB (80.0 GiB)"); GPUs listed there
without a capacity are left out of the menus.
"""
from __future__ import annotations

import html

import math

import ipywidgets as widgets

from labutils import interconnects, plots
from labutils.gpu_records import memory_text

_WIDE = {"description_width": "initial"}
_POWERS_OF_TWO = [2**k for k in range(11)]  # 1 .. 1024
#: the closed forms of labutils.schedules.bubble_formula, as a reader writes them
_BUBBLE_FORMULA_TEXT = {
    "naive": ("(p-1)/p", "p-1"),
    "gpipe": ("(p-1)/(m+p-1)", "(p-1)/m"),
    "1f1b": ("(p-1)/(m+p-1)", "(p-1)/m"),
    "interleaved_1f1b": ("(p-1)/(v m+p-1)", "(p-1)/(v m)"),
}
#: slider ranges (inclusive); parameter counts as powers of ten
_STAGES = (2, 8)
_MICROBATCHES = (1, 32)
_CHUNKS = (1, 4)
_BACKWARD_RATIO = (0.5, 4.0)
_PARAMS_LOG10 = (8.0, 12.5)
_ZERO_STAGES = [("DDP (stage 0)", 0), ("ZeRO-1: optimizer states", 1), ("ZeRO-2: + gradients", 2),
                ("ZeRO-3: + parameters", 3)]
_INTRA_NODE_LINKS = [("NVLink", "nvlink"), ("PCIe only", "pcie")]  # labutils.strategy.INTRA_NODE_LINKS
#: inter-node links per GPU, per direction: Gb/s / 8 bits per byte (labutils.interconnects, after the
#: InfiniBand Trade Association's port speeds)
_INTER_NODE_LINKS = [(f"{link.label}, {link.rate_text.split(' per ')[0]} = {link.per_direction_GBps:g} GB/s",
                      link.per_direction_GBps) for link in map(interconnects.link, ("ib_hdr", "ib_ndr"))]
#: all-reduce explorer: log2 of the ranks n, log10 of alpha in us and of the bandwidth in GB/s
_LOG2_RANKS = (1, 12)
_ALPHA_US_LOG10 = (-1.0, 3.0)          # 0.1 us .. 1 ms per message
_BANDWIDTH_GBPS_LOG10 = (-1.0, 3.0)    # 0.1 .. 1000 GB/s per direction
#: the all-reduce algorithms compared, with their alpha-beta times (labutils.costmodel.collective_time)
_ALLREDUCE_ALGORITHMS = {
    "ring": "ring: 2(n-1) alpha + 2(n-1)/n S beta",
    "double_binary_tree": "double binary tree (approx.): 2 lg n alpha + 2(n-1)/n S beta",
    "recursive_doubling": "recursive doubling: lg n alpha + lg n S beta",
}
#: all-reduce sizes S drawn: 8 B to 1 GiB, 8 points per factor of two
_ALLREDUCE_SIZES = [8 * 2 ** (k / 8) for k in range(8 * 27 + 1)]


def _check_range(name: str, value, bounds) -> None:
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} must be between {bounds[0]:g} and {bounds[1]:g}, got {value!r}")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")


def _params_slider(value: float) -> widgets.FloatLogSlider:
    _check_range("num_params", value, (10 ** _PARAMS_LOG10[0], 10 ** _PARAMS_LOG10[1]))
    return widgets.FloatLogSlider(value=value, base=10, min=_PARAMS_LOG10[0], max=_PARAMS_LOG10[1], step=0.01,
                                  description="parameters", readout_format=".3g", continuous_update=False,
                                  style=_WIDE)


def _gpu_dropdown(gpu: str) -> widgets.Dropdown:
    options = gpu_memory_options()
    _check_choice("gpu", gpu, [key for _, key in options])
    return widgets.Dropdown(options=options, value=gpu, description="GPU")


def gpu_memory_options() -> list[tuple[str, str]]:
    """(menu label, DEVICES key) for every GPU in ``labutils.roofline.DEVICES`` with a known capacity."""
    from labutils.roofline import DEVICES

    return [(f"{device.name} ({memory_text(device.memory_bytes)})", key)
            for key, device in DEVICES.items() if device.memory_bytes]


class _Dashboard(widgets.VBox):
    """Controls on top, then the picture (if any), then the readout; redrawn on every change.

    Subclasses define ``_redraw()``, which reads ``self.controls`` and sets ``self.readout``
    (and ``self.image``); a ValueError it raises is shown in the readout instead.
    """

    def __init__(self, controls: dict[str, widgets.Widget], with_image: bool):
        self.controls = controls
        self.readout = widgets.HTML()
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", height="auto")) \
            if with_image else None
        children = [widgets.HBox(list(controls.values()), layout=widgets.Layout(flex_flow="row wrap"))]
        children += [self.image] if with_image else []
        super().__init__(children + [self.readout])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.update()

    def _on_change(self, _change) -> None:
        self.update()

    def update(self) -> None:
        """Recompute from the controls' values and redraw the picture and the readout."""
        try:
            self._redraw()
        except ValueError as error:  # a combination the model rejects, e.g. m not a multiple of p
            if self.image is not None:
                self.image.value = b""
            self.readout.value = f"<span style='color:#b00020'>{html.escape(str(error))}</span>"


# ----------------------------------------------------------------------------- any figure


def _checked_value(name: str, control: widgets.Widget):
    """A control's value; a float slider's must be finite and inside its range (else a ValueError)."""
    value = control.value
    if isinstance(control, widgets.FloatLogSlider):
        low, high = control.base ** control.min, control.base ** control.max
    elif isinstance(control, widgets.FloatSlider):
        low, high = control.min, control.max
    else:
        return value
    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise ValueError(f"{name} = {value!r} is not a number between {low:g} and {high:g}")
    return value


class FigureExplorer(_Dashboard):
    """Any ``draw(**values)`` that returns a Figure, a text, or both, redrawn whenever a control moves."""

    def __init__(self, draw, controls: dict[str, widgets.Widget]):
        if not callable(draw):
            raise ValueError(f"draw must be a function of the controls' values, got {draw!r}")
        if not controls or not all(isinstance(control, widgets.ValueWidget) for control in controls.values()):
            raise ValueError("controls must be ipywidgets with a value, e.g. {'n': IntSlider(...)}, by argument name")
        self.draw = draw
        super().__init__(dict(controls), with_image=True)

    def _redraw(self) -> None:
        from matplotlib.figure import Figure

        result = self.draw(**{name: _checked_value(name, control) for name, control in self.controls.items()})
        parts = result if isinstance(result, tuple) else (result,)
        figures = [part for part in parts if isinstance(part, Figure)]
        lines = [str(part) for part in parts if part is not None and not isinstance(part, Figure)]
        self.image.value = plots.figure_png(figures[0]) if figures else b""
        self.image.layout.display = None if figures else "none"
        self.readout.value = "".join(f"<pre>{html.escape(line)}</pre>" for line in lines)


def figure_explorer(draw, **controls: widgets.Widget) -> FigureExplorer:
    """A dashboard over ``draw``: one control per argument; what it returns is shown, as PNG and text.

    ``draw(**values)`` returns a matplotlib Figure (from ``labutils.plots``: built without
    pyplot), a text, or a tuple of both; it should not print (a callback's prints do not reach
    the notebook). Unlike ``ipywidgets.interact`` with pyplot, the figure is rendered to PNG
    here (no pyplot state, no Output widget), a float slider's value is checked to be finite and
    inside its range before ``draw`` runs, and a ValueError is shown as one red line::

        widgets.figure_explorer(lambda n: plots.busbw_factor_curves(...),
                                n=ipywidgets.IntSlider(value=8, min=2, max=64))
    """
    return FigureExplorer(draw, controls)


# ----------------------------------------------------------------------------- pipelines


class PipelineExplorer(_Dashboard):
    """Pipeline schedule, p, m, v and t_B/t_F -> Gantt chart and the bubble, measured and by formula."""

    def __init__(self, schedule: str, num_stages: int, num_microbatches: int, num_chunks: int,
                 backward_ratio: float):
        from labutils.schedules import SCHEDULES

        _check_choice("schedule", schedule, SCHEDULES)
        for name, value, bounds in (("num_stages", num_stages, _STAGES),
                                    ("num_microbatches", num_microbatches, _MICROBATCHES),
                                    ("num_chunks", num_chunks, _CHUNKS),
                                    ("backward_ratio", backward_ratio, _BACKWARD_RATIO)):
            _check_range(name, value, bounds)
        controls = {
            "schedule": widgets.Dropdown(options=list(SCHEDULES), value=schedule, description="schedule"),
            "p": widgets.IntSlider(value=num_stages, min=_STAGES[0], max=_STAGES[1], description="stages p",
                                   continuous_update=False, style=_WIDE),
            "m": widgets.IntSlider(value=num_microbatches, min=_MICROBATCHES[0], max=_MICROBATCHES[1],
                                   description="microbatches m", continuous_update=False, style=_WIDE),
            "v": widgets.IntSlider(value=num_chunks, min=_CHUNKS[0], max=_CHUNKS[1],
                                   description="chunks per rank v", continuous_update=False, style=_WIDE),
            "ratio": widgets.FloatSlider(value=backward_ratio, min=_BACKWARD_RATIO[0], max=_BACKWARD_RATIO[1],
                                         step=0.25, description="t_B / t_F", continuous_update=False,
                                         style=_WIDE),
        }
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils import schedules

        name = self.controls["schedule"].value
        interleaved = name == "interleaved_1f1b"
        self.controls["v"].disabled = not interleaved
        p, m = self.controls["p"].value, self.controls["m"].value
        v = self.controls["v"].value if interleaved else 1
        ratio = self.controls["ratio"].value
        # one chunk is 1/v of a stage: F takes t_F / v, so every schedule does the same work
        timeline = schedules.simulate(schedules.build_schedule(name, p, m, v), 1.0 / v, ratio / v)
        unit = "units of t_F, one stage's forward time" + (f"; one chunk takes t_F / {v}" if v > 1 else "")
        self.image.value = plots.figure_png(plots.pipeline_gantt(timeline, time_unit=unit))
        formula = schedules.bubble_formula(name, p, m, v)
        of_total_text, relative_text = _BUBBLE_FORMULA_TEXT[name]
        in_flight = ("microbatches in flight" if v == 1 else
                     f"(microbatch, chunk) activations held, each 1/{v} of a stage's,")
        self.readout.value = (
            f"<b>bubble measured</b> on this timeline: {timeline.bubble_fraction():.1%} of total rank-time "
            f"(t_B / t_F = {ratio:g})<br>"
            f"<b>formula</b> (equal stage costs): {of_total_text} = {formula['of_total']:.1%} of the total time; "
            f"{relative_text} = {formula['relative_to_ideal']:.1%} relative to the ideal time "
            f"(the same bubble, two denominators)<br>"
            f"<b>{in_flight}</b> at most, per stage (activation memory): {timeline.peak_in_flight()}"
        )


def pipeline_explorer(schedule: str = "1f1b", num_stages: int = 4, num_microbatches: int = 8,
                      num_chunks: int = 2, backward_ratio: float = 2.0) -> PipelineExplorer:
    """Dashboard of pipeline schedules: the Gantt chart of ``labutils.schedules.simulate`` and its bubble.

    Controls (``.controls``): "schedule", "p" (stages), "m" (microbatches), "v" (chunks per
    rank, interleaved_1f1b only) and "ratio" (t_B / t_F, backward time over forward time).
    ``.readout`` gives the bubble measured on the timeline and by formula, in both
    conventions (share of the total time, and relative to the ideal time), and the most
    microbatches each stage holds at once.
    """
    return PipelineExplorer(schedule, num_stages, num_microbatches, num_chunks, backward_ratio)


# ----------------------------------------------------------------------------- ZeRO memory


class ZeroCalculator(_Dashboard):
    """Parameters, data-parallel degree N, ZeRO stage and GPU -> memory bars and "fits / does not fit"."""

    def __init__(self, num_params: float, world_size: int, stage: int, gpu: str):
        _check_choice("world_size", world_size, _POWERS_OF_TWO)
        _check_choice("stage", stage, [value for _, value in _ZERO_STAGES])
        controls = {
            "params": _params_slider(num_params),
            "N": widgets.SelectionSlider(options=_POWERS_OF_TWO, value=world_size,
                                         description="data-parallel GPUs N", continuous_update=False,
                                         style=_WIDE),
            "stage": widgets.Dropdown(options=_ZERO_STAGES, value=stage, description="stage"),
            "gpu": _gpu_dropdown(gpu),
        }
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils import costmodel
        from labutils.roofline import DEVICES

        num_params, world_size = self.controls["params"].value, self.controls["N"].value
        stage = self.controls["stage"].value
        device = DEVICES[self.controls["gpu"].value]
        table = costmodel.zero_memory_table(num_params, world_size)
        title = (f"Model states per GPU: {num_params / 1e9:.3g} billion parameters, N = {world_size} data-parallel GPUs"
                 "\n(activations not included)")
        self.image.value = plots.figure_png(plots.zero_memory_bars(
            table, device.memory_bytes, device.name, title=title, highlight_stage=stage))
        needed = table[stage].total
        verdict = ("<b style='color:#1a7f37'>fits</b>" if needed <= device.memory_bytes
                   else "<b style='color:#b00020'>does not fit</b>")
        self.readout.value = (
            f"{self.controls['stage'].label} on {world_size} GPUs: {verdict} "
            f"({needed / plots.GB:.1f} GB of {memory_text(device.memory_bytes)} per {html.escape(device.name)}) "
            f"for parameters, gradients and optimizer states; activations, buffers and the CUDA "
            f"context come on top."
        )


def zero_calculator(num_params: float = 7.5e9, world_size: int = 64, stage: int = 0,
                    gpu: str = "h100") -> ZeroCalculator:
    """Dashboard of ZeRO memory per GPU (``labutils.costmodel.zero_memory_table``, arXiv:1910.02054).

    Controls: "params" (parameter count), "N" (data-parallel GPUs), "stage" (0 = DDP, 1-3),
    "gpu" (a ``labutils.roofline.DEVICES`` key with a memory capacity). The chart shows
    every stage with the selected one shaded; ``.readout`` says whether the selected
    stage fits the GPU ("X GB of Y GB"), GB = 1e9 bytes.
    """
    return ZeroCalculator(num_params, world_size, stage, gpu)


# ----------------------------------------------------------------------------- strategy


class StrategyChooser(_Dashboard):
    """Model size, GPUs per node, nodes, links and GPU -> suggested TP x PP x DP, ZeRO stage, reasons."""

    def __init__(self, num_params: float, gpus_per_node: int, num_nodes: int, intra_node: str,
                 inter_node_GBps: float, gpu: str):
        _check_choice("gpus_per_node", gpus_per_node, (1, 2, 4, 8))
        _check_choice("num_nodes", num_nodes, _POWERS_OF_TWO)
        _check_choice("intra_node", intra_node, [value for _, value in _INTRA_NODE_LINKS])
        _check_choice("inter_node_GBps", inter_node_GBps, [value for _, value in _INTER_NODE_LINKS])
        controls = {
            "params": _params_slider(num_params),
            "gpus_per_node": widgets.Dropdown(options=[1, 2, 4, 8], value=gpus_per_node,
                                              description="GPUs per node", style=_WIDE),
            "nodes": widgets.SelectionSlider(options=_POWERS_OF_TWO, value=num_nodes, description="nodes",
                                             continuous_update=False, style=_WIDE),
            "intra_node": widgets.Dropdown(options=_INTRA_NODE_LINKS, value=intra_node, description="inside a node", style=_WIDE),
            "inter_node_GBps": widgets.Dropdown(options=_INTER_NODE_LINKS, value=inter_node_GBps,
                                                description="between nodes, per GPU", style=_WIDE),
            "gpu": _gpu_dropdown(gpu),
        }
        self.suggestion = None
        super().__init__(controls, with_image=False)

    def _redraw(self) -> None:
        from labutils import strategy
        from labutils.roofline import DEVICES

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
            f"{s.memory_per_gpu_bytes / plots.GB:.1f} GB of {memory_text(device.memory_bytes)} per GPU, "
            f"{verdict}<ul>{reasons}</ul>"
        )


def strategy_chooser(num_params: float = 70e9, gpus_per_node: int = 8, num_nodes: int = 4,
                     intra_node: str = "nvlink", inter_node_GBps: float = 50.0,
                     gpu: str = "h100") -> StrategyChooser:
    """Dashboard over ``labutils.strategy.suggest``: a parallel layout for a model on a cluster.

    Controls: "params", "gpus_per_node", "nodes", "intra_node" (NVLink or PCIe),
    "inter_node_GBps" (InfiniBand per GPU, per direction), "gpu". ``.readout`` shows the
    suggested tensor- (TP), pipeline- (PP) and data-parallel (DP) degrees, the ZeRO stage,
    the memory per GPU and the reasons; ``.suggestion`` is the ``Suggestion`` itself.
    """
    return StrategyChooser(num_params, gpus_per_node, num_nodes, intra_node, inter_node_GBps, gpu)


# ----------------------------------------------------------------------------- collectives


def _positive_finite(name: str, value) -> float:
    """``value`` as a float, or a ValueError when it is not a finite number > 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _clamped_log_slider(name: str, value: float, bounds_log10, description: str) -> tuple[widgets.FloatLogSlider, str]:
    """A FloatLogSlider starting at ``value`` (clamped into its range) and a note when it was clamped."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    low, high = 10 ** bounds_log10[0], 10 ** bounds_log10[1]
    start = min(max(float(value), low), high)
    note = "" if start == value else f"{name} = {value:.3g} lies outside the slider's {low:g} to {high:g}; it starts at {start:g}. "
    slider = widgets.FloatLogSlider(value=start, base=10, min=bounds_log10[0], max=bounds_log10[1], step=0.05,
                                    description=description, readout_format=".3g", continuous_update=False,
                                    style=_WIDE)
    return slider, note


class AllReduceExplorer(_Dashboard):
    """Ranks n, latency alpha and bandwidth 1/beta -> all-reduce time of ring, tree and recursive doubling."""

    def __init__(self, num_ranks: int, alpha_s: float, beta_s_per_byte: float):
        if not isinstance(num_ranks, int) or num_ranks < 2 or num_ranks & (num_ranks - 1):
            raise ValueError(f"num_ranks must be a power of two from 2 to {2 ** _LOG2_RANKS[1]}, got {num_ranks!r}")
        _check_range("num_ranks", num_ranks, (2 ** _LOG2_RANKS[0], 2 ** _LOG2_RANKS[1]))
        for name, value in (("alpha_s", alpha_s), ("beta_s_per_byte", beta_s_per_byte)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        alpha_slider, alpha_note = _clamped_log_slider("alpha (us)", alpha_s * 1e6, _ALPHA_US_LOG10,
                                                       "alpha (us per message)")
        fastest = 10 ** _BANDWIDTH_GBPS_LOG10[1]
        bandwidth_slider, bandwidth_note = _clamped_log_slider(
            "1/beta (GB/s)", 1 / beta_s_per_byte / 1e9 if beta_s_per_byte > 0 else fastest,
            _BANDWIDTH_GBPS_LOG10, "1/beta (GB/s per direction)")
        if beta_s_per_byte == 0:
            bandwidth_note = f"beta = 0 (no bandwidth term): 1/beta starts at {fastest:g} GB/s. "
        self.start_note = alpha_note + bandwidth_note
        controls = {
            "log2_n": widgets.IntSlider(value=int(math.log2(num_ranks)), min=_LOG2_RANKS[0], max=_LOG2_RANKS[1],
                                        description="log2 n (ranks)", continuous_update=False, style=_WIDE),
            "alpha_us": alpha_slider,
            "bandwidth_GBps": bandwidth_slider,
        }
        self.times = {}
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils import costmodel

        n = 2 ** self.controls["log2_n"].value
        alpha = _positive_finite("alpha", self.controls["alpha_us"].value) * 1e-6
        bandwidth_GBps = _positive_finite("1/beta", self.controls["bandwidth_GBps"].value)
        beta = 1 / (bandwidth_GBps * 1e9)
        self.times = {algorithm: [costmodel.collective_time("all_reduce", algorithm, size, n, alpha, beta)
                                  for size in _ALLREDUCE_SIZES]
                      for algorithm in _ALLREDUCE_ALGORITHMS}
        title = f"n = {n} ranks, alpha = {alpha * 1e6:.3g} us, 1/beta = {bandwidth_GBps:.3g} GB/s per direction"
        curves = {_ALLREDUCE_ALGORITHMS[name]: times for name, times in self.times.items()}
        self.image.value = plots.figure_png(plots.algorithm_times(_ALLREDUCE_SIZES, {title: curves}))
        ring_wins = [size for size, ring, doubling in zip(_ALLREDUCE_SIZES, self.times["ring"],
                                                          self.times["recursive_doubling"]) if ring <= doubling]
        if ring_wins:
            crossing = f"the ring beats recursive doubling from S = {plots.format_bytes_binary(ring_wins[0])}"
        else:
            crossing = "the ring never beats recursive doubling up to 1 GiB" + (
                ": at n = 2 both send S per rank and the ring takes one more step" if n == 2 else "")
        fastest = {label: min(self.times, key=lambda name: self.times[name][index])
                   for label, index in (("8 B", 0), ("1 GiB", -1))}
        self.readout.value = (html.escape(self.start_note) + f"{crossing}; fastest at S = 8 B: {fastest['8 B']}, "
                              f"at S = 1 GiB: {fastest['1 GiB']}")


def allreduce_explorer(num_ranks: int = 8, alpha_s: float = 10e-6, beta_s_per_byte: float = 1e-10) -> AllReduceExplorer:
    """Dashboard of all-reduce algorithms under the alpha-beta model (``labutils.costmodel.collective_time``).

    Controls: "log2_n" (n = 2 to 4096 ranks), "alpha_us" (latency per message, 0.1 us to
    1 ms), "bandwidth_GBps" (1/beta, 0.1 to 1000 GB/s per direction). The chart draws the
    model time (ms) of ring, double binary tree and recursive doubling against the size S
    (8 B to 1 GiB); ``.readout`` says from which S the ring beats recursive doubling and
    which is fastest at both ends; ``.times`` holds the seconds per algorithm.
    Start from a fit (``AlphaBetaFit.alpha``, ``.beta``): values outside the sliders' ranges
    start at the nearest end, and the readout says so; beta = 0 (no bandwidth term) starts
    at the largest bandwidth.
    """
    return AllReduceExplorer(num_ranks, alpha_s, beta_s_per_byte)


# ----------------------------------------------------------------------------- topology


class TopologyExplorer(_Dashboard):
    """A menu of ``nvidia-smi topo -m`` matrices -> the coloured matrix and what it says in words."""

    def __init__(self, topologies: dict, sources: dict | None, start: str | None):
        if not topologies:
            raise ValueError("no topologies to explore: pass {name: labutils.topology.Topology}")
        for name, topo in topologies.items():
            if not hasattr(topo, "gpu_pairs_by_link"):
                raise ValueError(f"{name!r} is not a labutils.topology.Topology")
        start = next(iter(topologies)) if start is None else start
        _check_choice("start", start, list(topologies))
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
    """Dashboard over parsed ``nvidia-smi topo -m`` matrices (``labutils.topology.Topology``).

    ``topologies``: name -> Topology; ``sources``: name -> where it was published (shown
    above the summary); ``start``: the name shown first. The control "name" picks a matrix;
    the picture is ``labutils.plots.topology_matrices`` and ``.readout`` its summary in words
    and the GPU pairs per link type.
    """
    return TopologyExplorer(topologies, sources, start)
