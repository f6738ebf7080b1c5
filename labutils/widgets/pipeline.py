"""Pipeline schedules: the Gantt chart and the bubble (``pipeline_explorer``)."""
from __future__ import annotations

import ipywidgets as widgets

from labutils import plots
from labutils.widgets.base import WIDE, Dashboard, check_choice, check_range

#: the closed forms of labutils.costmodel.schedules.bubble_formula, as a reader writes them
_BUBBLE_FORMULA_TEXT = {
    "naive": ("(p-1)/p", "p-1"),
    "gpipe": ("(p-1)/(m+p-1)", "(p-1)/m"),
    "1f1b": ("(p-1)/(m+p-1)", "(p-1)/m"),
    "interleaved_1f1b": ("(p-1)/(v m+p-1)", "(p-1)/(v m)"),
}
#: slider ranges (inclusive)
_STAGES = (2, 8)
_MICROBATCHES = (1, 32)
_CHUNKS = (1, 4)
_BACKWARD_RATIO = (0.5, 4.0)


class PipelineExplorer(Dashboard):
    """Pipeline schedule, p, m, v and t_B/t_F -> Gantt chart and the bubble, measured and by formula."""

    def __init__(self, schedule: str, num_stages: int, num_microbatches: int, num_chunks: int,
                 backward_ratio: float):
        from labutils.costmodel.schedules import SCHEDULES

        check_choice("schedule", schedule, SCHEDULES)
        for name, value, bounds in (("num_stages", num_stages, _STAGES),
                                    ("num_microbatches", num_microbatches, _MICROBATCHES),
                                    ("num_chunks", num_chunks, _CHUNKS),
                                    ("backward_ratio", backward_ratio, _BACKWARD_RATIO)):
            check_range(name, value, bounds)
        controls = {
            "schedule": widgets.Dropdown(options=list(SCHEDULES), value=schedule, description="schedule"),
            "p": widgets.IntSlider(value=num_stages, min=_STAGES[0], max=_STAGES[1], description="stages p",
                                   continuous_update=False, style=WIDE),
            "m": widgets.IntSlider(value=num_microbatches, min=_MICROBATCHES[0], max=_MICROBATCHES[1],
                                   description="microbatches m", continuous_update=False, style=WIDE),
            "v": widgets.IntSlider(value=num_chunks, min=_CHUNKS[0], max=_CHUNKS[1],
                                   description="chunks per rank v", continuous_update=False, style=WIDE),
            "ratio": widgets.FloatSlider(value=backward_ratio, min=_BACKWARD_RATIO[0], max=_BACKWARD_RATIO[1],
                                         step=0.25, description="t_B / t_F", continuous_update=False,
                                         style=WIDE),
        }
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils.costmodel import schedules

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
    """Dashboard of pipeline schedules: the Gantt chart of ``labutils.costmodel.schedules.simulate`` and its bubble.

    Controls (``.controls``): "schedule", "p" (stages), "m" (microbatches), "v" (chunks per
    rank, interleaved_1f1b only) and "ratio" (t_B / t_F, backward time over forward time).
    ``.readout`` gives the bubble measured on the timeline and by formula, in both
    conventions (share of the total time, and relative to the ideal time), and the most
    microbatches each stage holds at once.
    """
    return PipelineExplorer(schedule, num_stages, num_microbatches, num_chunks, backward_ratio)
