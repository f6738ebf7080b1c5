"""ZeRO memory per GPU, stage by stage (``zero_calculator``)."""
from __future__ import annotations

import html

import ipywidgets as widgets

from labutils import plots
from labutils.widgets.base import Dashboard, check_choice, gpu_dropdown, memory_of, params_slider, powers_of_two_slider

_ZERO_STAGES = [("DDP (stage 0)", 0), ("ZeRO-1: optimizer states", 1), ("ZeRO-2: + gradients", 2),
                ("ZeRO-3: + parameters", 3)]


class ZeroCalculator(Dashboard):
    """Parameters, data-parallel degree N, ZeRO stage and GPU -> memory bars and "fits / does not fit"."""

    def __init__(self, num_params: float, world_size: int, stage: int, gpu: str):
        check_choice("stage", stage, [value for _, value in _ZERO_STAGES])
        controls = {
            "params": params_slider(num_params),
            "N": powers_of_two_slider("world_size", world_size, "data-parallel GPUs N"),
            "stage": widgets.Dropdown(options=_ZERO_STAGES, value=stage, description="stage"),
            "gpu": gpu_dropdown(gpu),
        }
        super().__init__(controls, with_image=True)

    def _redraw(self) -> None:
        from labutils import costmodel
        from labutils.costmodel.roofline import DEVICES

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
            f"({memory_of(needed, device)} per {html.escape(device.name)}) "
            f"for parameters, gradients and optimizer states; activations, buffers and the CUDA "
            f"context come on top."
        )


def zero_calculator(num_params: float = 7.5e9, world_size: int = 64, stage: int = 0,
                    gpu: str = "h100") -> ZeroCalculator:
    """Dashboard of ZeRO memory per GPU (``labutils.costmodel.zero_memory_table``, arXiv:1910.02054).

    Controls: "params" (parameter count), "N" (data-parallel GPUs), "stage" (0 = DDP, 1-3),
    "gpu" (a ``labutils.costmodel.roofline.DEVICES`` key with a memory capacity). The chart shows
    every stage with the selected one shaded; ``.readout`` says whether the selected
    stage fits the GPU ("X GB of Y GB"), GB = 1e9 bytes.
    """
    return ZeroCalculator(num_params, world_size, stage, gpu)
