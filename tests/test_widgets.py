"""labutils.widgets: each dashboard reacts to its controls (readout and picture change)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets  # noqa: E402
import pytest  # noqa: E402

from labutils import costmodel, widgets  # noqa: E402
from labutils.costmodel import schedules, strategy
from labutils.costmodel.roofline import DEVICES  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png(dashboard) -> bytes:
    """The dashboard's picture as bytes (ipywidgets keeps it as a memoryview)."""
    return bytes(dashboard.image.value)


def test_gpu_menu_lists_only_gpus_with_a_capacity():
    options = dict((key, label) for label, key in widgets.gpu_memory_options())
    assert options["h100"] == "H100 SXM (85.9 GB (80.0 GiB))"
    assert options["h200"] == "H200 SXM (151.4 GB (141.0 GiB))"
    assert all(DEVICES[key].memory_bytes for key in options)
    assert set(options) == {key for key, device in DEVICES.items() if device.memory_bytes}


# ----------------------------------------------------------------------------- pipelines


def test_pipeline_explorer_follows_m():
    explorer = widgets.pipeline_explorer("gpipe", num_stages=4, num_microbatches=4)
    assert isinstance(explorer, ipywidgets.VBox)
    assert png(explorer).startswith(PNG_SIGNATURE)
    assert "42.9% of total rank-time" in explorer.readout.value  # 3/7
    before_readout, before_image = explorer.readout.value, png(explorer)

    explorer.controls["m"].value = 12
    assert "20.0% of total rank-time" in explorer.readout.value  # 3/15
    assert "(p-1)/m = 25.0% relative to the ideal time" in explorer.readout.value
    assert explorer.readout.value != before_readout
    assert png(explorer) != before_image and png(explorer).startswith(PNG_SIGNATURE)


def test_pipeline_explorer_readout_matches_the_simulation():
    explorer = widgets.pipeline_explorer("1f1b", num_stages=3, num_microbatches=6, backward_ratio=3.0)
    timeline = schedules.simulate(schedules.build_schedule("1f1b", 3, 6), 1.0, 3.0)
    assert f"{timeline.bubble_fraction():.1%} of total rank-time" in explorer.readout.value
    assert str(timeline.peak_in_flight()) in explorer.readout.value  # [3, 2, 1]
    explorer.controls["schedule"].value = "gpipe"
    assert "[6, 6, 6]" in explorer.readout.value  # GPipe holds every microbatch


def test_pipeline_explorer_chunks_only_for_interleaved():
    explorer = widgets.pipeline_explorer("1f1b", num_stages=4, num_microbatches=8, num_chunks=2)
    assert explorer.controls["v"].disabled
    one_f_one_b = explorer.readout.value
    explorer.controls["v"].value = 3  # ignored by 1f1b
    assert explorer.readout.value == one_f_one_b

    explorer.controls["schedule"].value = "interleaved_1f1b"
    assert not explorer.controls["v"].disabled
    assert "(p-1)/(v m) = 12.5% relative to the ideal time" in explorer.readout.value  # 3 / (3 x 8)
    explorer.controls["v"].value = 2
    assert "(p-1)/(v m) = 18.8% relative to the ideal time" in explorer.readout.value  # 3 / (2 x 8)
    # 11 chunk activations on rank 0 is not 1F1B's bound of p = 4 broken: each is half a stage's
    assert "(microbatch, chunk) activations held, each 1/2 of a stage's," in explorer.readout.value
    assert "microbatches in flight" in one_f_one_b


def test_pipeline_explorer_shows_model_errors_in_the_readout():
    explorer = widgets.pipeline_explorer("interleaved_1f1b", num_stages=4, num_microbatches=8)
    explorer.controls["m"].value = 6
    assert "multiple of num_stages" in explorer.readout.value
    assert png(explorer) == b""
    explorer.controls["m"].value = 12
    assert "bubble measured" in explorer.readout.value and png(explorer).startswith(PNG_SIGNATURE)


# ----------------------------------------------------------------------------- ZeRO


def test_zero_calculator_stage_and_gpu_change_the_verdict():
    calculator = widgets.zero_calculator(num_params=7.5e9, world_size=64, stage=0, gpu="h100")
    assert "does not fit" in calculator.readout.value
    assert "120.0 GB of 85.9 GB (80.0 GiB)" in calculator.readout.value
    first_image = png(calculator)

    calculator.controls["stage"].value = 1
    assert "fits" in calculator.readout.value and "does not fit" not in calculator.readout.value
    assert "31.4 GB of 85.9 GB (80.0 GiB)" in calculator.readout.value
    assert png(calculator) != first_image

    calculator.controls["gpu"].value = "h200"
    assert "31.4 GB of 151.4 GB (141.0 GiB)" in calculator.readout.value


def test_zero_calculator_follows_parameters_and_world_size():
    calculator = widgets.zero_calculator(num_params=1e9, world_size=8, stage=3)
    expected = costmodel.zero_memory(1e9, 8, 3).total / 1e9
    assert f"{expected:.1f} GB of 85.9 GB (80.0 GiB)" in calculator.readout.value  # 16 x 1e9 / 8 = 2.0 GB
    calculator.controls["N"].value = 16
    assert "1.0 GB of 85.9 GB (80.0 GiB)" in calculator.readout.value
    calculator.controls["params"].value = 1e11
    assert "100.0 GB of 85.9 GB (80.0 GiB)" in calculator.readout.value and "does not fit" in calculator.readout.value


# ----------------------------------------------------------------------------- strategy


def test_strategy_chooser_shows_the_suggestion_and_reasons():
    chooser = widgets.strategy_chooser(num_params=70e9, gpus_per_node=8, num_nodes=4, gpu="h100")
    expected = strategy.suggest(70e9, 32, 8, DEVICES["h100"].memory_bytes, intra_node="nvlink",
                                inter_node_GBps=50.0)
    assert chooser.suggestion == expected
    assert f"TP = {expected.tp} x PP = {expected.pp} x DP = {expected.dp}" in chooser.readout.value
    assert chooser.readout.value.count("<li>") == len(expected.reasons)
    assert chooser.image is None


def test_strategy_chooser_reacts_to_model_size_and_links():
    chooser = widgets.strategy_chooser(num_params=1e9, gpus_per_node=8, num_nodes=1)
    small = chooser.suggestion
    assert (small.tp, small.pp, small.dp) == (1, 1, 8)  # fits one GPU: data parallel only

    chooser.controls["params"].value = 70e9
    assert chooser.suggestion != small
    assert "TP = 1 x PP = 1 x DP = 8" not in chooser.readout.value

    chooser.controls["params"].value = 300e9
    chooser.controls["intra_node"].value = "pcie"
    assert chooser.suggestion.tp == 1  # no tensor parallelism over PCIe
    assert "PCIe" in chooser.readout.value


def test_bad_starting_values_are_clear_errors():
    with pytest.raises(ValueError, match="schedule must be one of naive, gpipe"):
        widgets.pipeline_explorer("zb-h1")
    with pytest.raises(ValueError, match="num_stages must be between 2 and 8, got 16"):
        widgets.pipeline_explorer(num_stages=16)
    with pytest.raises(ValueError, match="world_size must be one of 1, 2, 4"):
        widgets.zero_calculator(world_size=48)
    with pytest.raises(ValueError, match="gpu must be one of .*h100.*; got 'tpu'"):
        widgets.zero_calculator(gpu="tpu")
    with pytest.raises(ValueError, match="num_params must be between"):
        widgets.strategy_chooser(num_params=1e15)
    with pytest.raises(ValueError, match="intra_node must be one of nvlink, pcie"):
        widgets.strategy_chooser(intra_node="infiniband")


# ----------------------------------------------------------------------------- all-reduce algorithms


def slider_settings(control):
    """(label, value) for a slider's minimum, middle and maximum, in the units of its .value."""
    if isinstance(control, ipywidgets.FloatLogSlider):  # min and max are exponents of the base
        low, high = control.min, control.max
        return [("min", control.base ** low), ("middle", control.base ** ((low + high) / 2)),
                ("max", control.base ** high)]
    return [("min", control.min), ("middle", (control.min + control.max) // 2), ("max", control.max)]


def test_allreduce_explorer_redraws_at_every_slider_end_without_pyplot():
    import time

    import matplotlib.pyplot as plt

    start = time.perf_counter()
    explorer = widgets.allreduce_explorer(num_ranks=8, alpha_s=50e-6, beta_s_per_byte=1e-9)
    print(f"\nfirst draw: {time.perf_counter() - start:.3f} s")
    assert png(explorer).startswith(PNG_SIGNATURE)
    for name, control in explorer.controls.items():
        for label, value in slider_settings(control):
            start = time.perf_counter()
            control.value = value
            elapsed = time.perf_counter() - start
            print(f"{name} = {value:.4g} ({label}): redraw {elapsed:.3f} s")
            assert png(explorer).startswith(PNG_SIGNATURE), (name, label, explorer.readout.value)
            assert "color:#b00020" not in explorer.readout.value, explorer.readout.value
            assert "fastest at S = 8 B" in explorer.readout.value
            assert control.value == pytest.approx(value)
    assert plt.get_fignums() == []  # no figure left in pyplot's global state


def test_allreduce_explorer_readout_follows_the_cost_model():
    explorer = widgets.allreduce_explorer(num_ranks=64, alpha_s=10e-6, beta_s_per_byte=1e-10)
    ring, doubling = explorer.times["ring"], explorer.times["recursive_doubling"]
    assert ring[0] == pytest.approx(costmodel.collective_time("all_reduce", "ring", 8, 64, 10e-6, 1e-10))
    first_win = next(index for index, (r, d) in enumerate(zip(ring, doubling)) if r <= d)
    assert first_win > 0 and ring[first_win - 1] > doubling[first_win - 1]
    assert "the ring beats recursive doubling from S =" in explorer.readout.value
    assert "fastest at S = 8 B: recursive_doubling" in explorer.readout.value
    explorer.controls["log2_n"].value = 1
    assert "never beats recursive doubling" in explorer.readout.value and "at n = 2" in explorer.readout.value


def test_allreduce_explorer_starts_from_a_fit_outside_the_slider_range():
    explorer = widgets.allreduce_explorer(num_ranks=4, alpha_s=0.0, beta_s_per_byte=0.0)
    assert explorer.controls["alpha_us"].value == pytest.approx(0.1)
    assert explorer.controls["bandwidth_GBps"].value == pytest.approx(1000)
    assert "alpha (us) = 0 lies outside the slider" in explorer.readout.value
    assert "beta = 0 (no bandwidth term)" in explorer.readout.value
    assert png(explorer).startswith(PNG_SIGNATURE)
    slow = widgets.allreduce_explorer(num_ranks=4, alpha_s=5e-3, beta_s_per_byte=1e-8)  # 5 ms, 0.1 GB/s
    assert slow.controls["alpha_us"].value == pytest.approx(1000)
    assert "lies outside" in slow.readout.value
    assert slow.controls["bandwidth_GBps"].value == pytest.approx(0.1)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_ranks": 6}, "num_ranks must be a power of two"),
    ({"num_ranks": 8192}, "num_ranks must be between 2 and 4096"),
    ({"num_ranks": 1}, "num_ranks must be a power of two"),
    ({"alpha_s": float("nan")}, "alpha_s must be a finite number >= 0"),
    ({"alpha_s": -1e-6}, "alpha_s must be a finite number >= 0"),
    ({"beta_s_per_byte": float("inf")}, "beta_s_per_byte must be a finite number >= 0"),
    ({"beta_s_per_byte": "fast"}, "beta_s_per_byte must be a finite number >= 0"),
])
def test_allreduce_explorer_bad_starting_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        widgets.allreduce_explorer(**kwargs)


# ----------------------------------------------------------------------------- topology


def test_topology_explorer_shows_the_chosen_matrix_and_its_summary():
    from labutils.machine import topology

    shipped = {example.name: example.topology for example in topology.examples()}
    names = list(shipped)
    explorer = widgets.topology_explorer(shipped, {names[1]: "published in a test"}, start=names[0])
    first = png(explorer)
    assert first.startswith(PNG_SIGNATURE)
    assert shipped[names[0]].summary().splitlines()[0] in explorer.readout.value
    explorer.controls["name"].value = names[1]
    assert png(explorer) != first and png(explorer).startswith(PNG_SIGNATURE)
    assert "published in a test" in explorer.readout.value
    for link, pairs in shipped[names[1]].gpu_pairs_by_link().items():
        assert f"{link}: {len(pairs)} GPU pair(s)" in explorer.readout.value
    with pytest.raises(ValueError, match="no topologies"):
        widgets.topology_explorer({})
    with pytest.raises(ValueError, match="start must be one of"):
        widgets.topology_explorer(shipped, start="DGX-9")


# ----------------------------------------------------------------------------- any figure


def test_figure_explorer_draws_what_the_function_returns():
    from labutils import plots

    calls = []

    def draw(n, scale):
        calls.append((n, scale))
        ranks = [2, 4, 8, 16]
        figure = plots.busbw_factor_curves(ranks, {"scaled": [scale * (r - 1) / r for r in ranks]}, world_size=n)
        return figure, f"n = {n}, scale = {scale:g}"

    explorer = widgets.figure_explorer(
        draw, n=ipywidgets.IntSlider(value=4, min=2, max=16),
        scale=ipywidgets.FloatLogSlider(value=1.0, base=10, min=-1, max=1))
    assert calls == [(4, 1.0)]
    assert png(explorer).startswith(PNG_SIGNATURE) and "n = 4, scale = 1" in explorer.readout.value
    first = png(explorer)
    explorer.controls["scale"].value = 10.0
    assert calls[-1] == (4, 10.0) and png(explorer) != first and "scale = 10" in explorer.readout.value


def test_a_float_slider_echo_does_not_redraw():
    """The browser sends a float slider's value back snapped to its step (0.4 -> 0.39999999999999997)."""
    calls = []
    explorer = widgets.figure_explorer(lambda mfu: calls.append(mfu) or f"MFU {mfu}",
                                       mfu=ipywidgets.FloatSlider(value=0.4, min=0.05, max=0.8, step=0.05))
    explorer.controls["mfu"].value = 0.39999999999999997   # what the browser sends back for 0.4
    assert explorer.controls["mfu"].value != 0.4 and calls == [0.4]
    explorer.controls["mfu"].value = 0.45
    assert calls == [0.4, 0.45]


def test_figure_explorer_text_only_and_errors():
    def describe(x):
        if x > 5:
            raise ValueError("x above 5 is not modelled")
        return f"x = {x}"

    explorer = widgets.figure_explorer(describe, x=ipywidgets.FloatSlider(value=1.0, min=0.0, max=10.0))
    assert png(explorer) == b"" and explorer.image.layout.display == "none"
    assert "<pre>x = 1.0</pre>" in explorer.readout.value
    explorer.controls["x"].value = 7.0
    assert "x above 5 is not modelled" in explorer.readout.value and "color:#b00020" in explorer.readout.value
    explorer.controls["x"].value = float("nan")  # what a broken front end could send
    assert "x = nan is not a number between 0 and 10" in explorer.readout.value
    with pytest.raises(ValueError, match="draw must be a function"):
        widgets.figure_explorer("plot", x=ipywidgets.IntSlider())
    with pytest.raises(ValueError, match="controls must be ipywidgets"):
        widgets.figure_explorer(describe, x=3)
