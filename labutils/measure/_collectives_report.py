"""nccl-tests' table for benchmark records, and alpha-beta points and fits from them.

Re-exported by :mod:`labutils.measure.collectives_bench`.
"""
from __future__ import annotations

from dataclasses import dataclass

from labutils.measure._collectives_layout import MODES, NCCL_TESTS_VERSION
from labutils.costmodel import AlphaBetaFit

#: what the fitted alpha of a torch.distributed benchmark holds besides the library's latency
ALPHA_NOTE = ("alpha includes torch.distributed's per-call CPU cost (Python, dispatch, launch), which bounds "
              "the time at small sizes: it is above the library's own latency (nccl-tests -G, a CUDA graph, "
              "removes that cost)")


@dataclass(frozen=True)
class MeasuredAlphaBetaFit(AlphaBetaFit):
    """An :class:`labutils.costmodel.AlphaBetaFit` of measured records, with ``note`` saying
    what alpha holds (:data:`ALPHA_NOTE`)."""

    note: str = ALPHA_NOTE

    def __str__(self) -> str:
        return (f"{self.op} ({self.algorithm}, {self.world_size} ranks): alpha = {self.alpha * 1e6:.2f} us, "
                f"1/beta = {self.bandwidth_GBps:.2f} GB/s (r2 {self.r2:.3f}); {self.note}")


def _time_text(time_us: float) -> str:
    if time_us >= 10000.0:
        return f"{time_us:7.0f}"
    if time_us >= 100.0:
        return f"{time_us:7.1f}"
    return f"{time_us:7.2f}"


def _mode_columns(record: dict, mode: str) -> str:
    time_us = record[f"{mode}_time_us"]
    if time_us is None:
        return "  %7s  %6s  %6s  %5s" % ("N/A", "N/A", "N/A", "N/A")
    wrong = record[f"{mode}_wrong"]
    wrong_text = "%5g" % wrong if wrong is not None else "%5s" % "N/A"
    return "  %7s  %6.2f  %6.2f  %s" % (_time_text(time_us), record[f"{mode}_algbw"], record[f"{mode}_busbw"],
                                        wrong_text)


def _header(first: dict, group: list[dict]) -> list[str]:
    missing = [m for m in MODES if all(r[f"{m}_time_us"] is None for r in group)]
    lines = [
        f"# labutils collective benchmark: {first['op']} on {first['world_size']} ranks, "
        f"backend {first['backend']} ({first.get('device', '?')})",
        f"# sizes {group[0]['size']} to {group[-1]['size']} B, warmup iters: {first.get('warmup', '?')} at every size "
        f"(as nccl-tests >= {NCCL_TESTS_VERSION}) iters: {first.get('iters', '?')} "
        f"validation: {int(any(r[f'{m}_wrong'] is not None for r in group for m in MODES))} "
        f"time: {first.get('stat', 'mean')} over iters, {first.get('time_across_ranks', 'avg')} over ranks",
        f"# small sizes: {ALPHA_NOTE}",
    ]
    lines += [f"# {line}" for line in gpu_state_lines(first.get("gpu_state"))]
    for mode in missing:
        label = "out-of-place" if mode == "oop" else "in-place"
        lines.append(f"# torch.distributed has no {label} {first['op']}: those columns read N/A")
    lines += [
        "#",
        "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
        % ("", "", "", "", ""),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
        % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
           "time", "algbw", "busbw", "#wrong"),
        "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
        % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
    ]
    return lines


def gpu_state_lines(state: list[dict] | None) -> list[str]:
    """One line per GPU of ``labutils.machine.gpu_state.gpu_state()`` (clocks, power, throttle reasons); [] without."""
    from labutils.machine.gpu_state import state_text

    return [state_text(entry) for entry in state or ()]


def memory_lines(group: list[dict]) -> list[str]:
    """The footer's peak memory per rank, next to the largest buffer (bytes printed in MB = 1e6 B)."""
    peaks = group[-1].get("peak_rss_bytes")
    if not peaks:
        return []
    buffer = max(max(r["size"] for r in group), 1)
    text = ", ".join(f"rank {rank} {peak / 1e6:.0f} MB ({peak / buffer:.2f}x)" for rank, peak in enumerate(peaks))
    lines = [f"# Peak host memory per rank (max RSS above the baseline after import; largest buffer "
             f"{buffer / 1e6:.0f} MB): {text}"]
    cuda_peaks = group[-1].get("peak_cuda_bytes")
    if cuda_peaks:
        lines.append("# Peak GPU memory per rank (torch.cuda.max_memory_allocated): "
                     + ", ".join(f"rank {rank} {peak / 1e6:.0f} MB" for rank, peak in enumerate(cuda_peaks)))
    return lines


def format_nccl_tests(records: list[dict]) -> str:
    """The records as nccl-tests prints them: '#' header, one row per size, footer.

    Rows are ``size count type redop root`` then ``time algbw busbw #wrong`` out of place
    and again in place; the footer counts failed checks and gives the average busbw of
    every measured column (``# Avg bus bandwidth``). Records of several benchmarks are
    printed one block each.
    """
    if not records:
        raise ValueError("no records to format: every requested size was smaller than one element per rank")
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        key = (r["op"], r["world_size"], r["backend"], r["type"], r["redop"], r["root"], r.get("stat", "mean"))
        groups.setdefault(key, []).append(r)
    lines = []
    for group in groups.values():
        lines += _header(group[0], group)
        busbws, failures = [], 0
        for r in group:
            root_text = "%6i" % r["root"]
            row = "%12li  %12li  %8s  %6s  %6s" % (r["size"], r["count"], r["type"], r["redop"], root_text)
            lines.append(row + "".join(_mode_columns(r, m) for m in MODES))
            for mode in MODES:
                if r[f"{mode}_busbw"] is not None:
                    busbws.append(r[f"{mode}_busbw"])
                if r[f"{mode}_wrong"]:
                    failures += 1
        lines.append(f"# Out of bounds values : {failures} {'FAILED' if failures else 'OK'}")
        lines.append("# Avg bus bandwidth    : %g " % (sum(busbws) / len(busbws)))
        lines += memory_lines(group)
        lines.append("#")
    return "\n".join(lines)


def alpha_beta_points(records: list[dict], mode: str | None = None) -> tuple[list[int], list[float]]:
    """(sizes in bytes, times in seconds) of one benchmark, for an alpha-beta fit.

    Sizes are nccl-tests' size column S; times the measured time of one call. ``mode``:
    "oop" or "ip"; by default out-of-place where it was measured, else in-place.
    """
    if not records:
        raise ValueError("no records: run a benchmark first")
    ops = {r["op"] for r in records}
    if len(ops) != 1:
        raise ValueError(f"records of several collectives ({', '.join(sorted(ops))}): pass one collective's records")
    if mode is None:
        mode = "oop" if records[0]["oop_time_us"] is not None else "ip"
    if mode not in MODES:
        raise ValueError(f"mode must be 'oop' (out-of-place) or 'ip' (in-place), got {mode!r}")
    measured = [r for r in records if r[f"{mode}_time_us"] is not None]
    if not measured:
        raise ValueError(f"{records[0]['op']} has no {mode} measurements: use mode='oop' or 'ip'")
    return [r["size"] for r in measured], [r[f"{mode}_time_us"] * 1e-6 for r in measured]


def fit_alpha_beta(records: list[dict], algorithm: str | None = None, mode: str | None = None, *,
                   weighting: str = "absolute"):
    """``labutils.costmodel.fit_alpha_beta`` on one benchmark's records: alpha (s) and beta (s/B).

    The op and world size come from the records; ``algorithm`` is the cost model's
    ("ring", "rabenseifner", ... for all_reduce; "pairwise" for all_to_all;
    "point_to_point" for sendrecv); by default the op's first in
    ``costmodel.COLLECTIVE_ALGORITHMS`` (ring for all_reduce, all_gather, reduce_scatter
    and broadcast).
    ``weighting`` "relative" fits relative errors, which gets alpha right from a sweep that
    starts at a few bytes (see ``costmodel.fit_alpha_beta``). The result's ``note`` (and its
    ``str``) says that alpha includes torch's per-call CPU cost (:data:`ALPHA_NOTE`).
    """
    from labutils import costmodel

    sizes, times = alpha_beta_points(records, mode)
    op = records[0]["op"]
    if algorithm is None:
        algorithm = costmodel.COLLECTIVE_ALGORITHMS[op][0]
    fit = costmodel.fit_alpha_beta(sizes, times, op, algorithm, world_size=records[0]["world_size"],
                                    weighting=weighting)
    return MeasuredAlphaBetaFit(**{name: getattr(fit, name) for name in fit.__dataclass_fields__})
