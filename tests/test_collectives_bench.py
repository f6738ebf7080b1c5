"""labutils.measure.collectives_bench: nccl-tests' sizes, algbw/busbw, #wrong and table, on 2 gloo ranks."""
from __future__ import annotations

import time

import pytest

import labutils
from labutils.measure import collectives_bench as cb
from labutils import costmodel

RECORD_KEYS = {"op", "world_size", "backend", "size", "count", "type", "redop", "root",
               *(f"{mode}_{what}" for mode in ("oop", "ip") for what in ("time_us", "algbw", "busbw", "wrong"))}


@pytest.fixture(scope="module")
def pool():
    with labutils.Pool(2, backend="gloo", timeout=120) as p:
        yield p


# ----- sizes and definitions (no ranks) ------------------------------------------------

@pytest.mark.parametrize("text, expected", [("8", 8), ("64K", 65536), ("64k", 65536), ("64M", 64 * 2**20),
                                            ("1G", 2**30), ("1.5K", 1536), (4096, 4096)])
def test_parse_size_follows_nccl_tests(text, expected):
    assert cb.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1Q", "-8", "K", "8 KB", True, None, -1])
def test_parse_size_rejects_junk(text):
    with pytest.raises(ValueError, match="bad size"):
        cb.parse_size(text)


def test_message_sizes_step_by_factor():
    assert cb.message_sizes(8, "64", 2) == [8, 16, 32, 64]
    assert cb.message_sizes("1K", "1M", 32) == [1024, 32768, 1048576]
    assert cb.message_sizes(8, 100, 4) == [8, 32]


@pytest.mark.parametrize("low, high, factor, match", [(64, 8, 2, "larger than max"), (8, 64, 1, "factor"),
                                                      (0, 64, 2, "at least 1 byte")])
def test_message_sizes_rejects_bad_ranges(low, high, factor, match):
    with pytest.raises(ValueError, match=match):
        cb.message_sizes(low, high, factor)


def test_busbw_factors_match_the_reference_table():
    n = 8
    assert cb.bus_bandwidth_factor("all_reduce", n) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert cb.bus_bandwidth_factor(op, n) == pytest.approx(7 / 8)
    for op in ("broadcast", "sendrecv"):
        assert cb.bus_bandwidth_factor(op, n) == 1.0


def test_bandwidths_use_the_size_column_over_time():
    algbw, busbw = cb.bandwidths("all_gather", 8 * 2**30, 0.1, 8)
    assert algbw == pytest.approx(8 * 2**30 / 0.1 / 1e9)
    assert busbw == pytest.approx(algbw * 7 / 8)


def test_layout_follows_nccl_tests_buffer_sizes():
    # 4 ranks, 1 KiB of float32 asked for: 256 elements in all
    assert cb.layout("all_reduce", 1024, 4, 4) == cb.Layout(size=1024, count=256, send_numel=256, recv_numel=256)
    assert cb.layout("all_gather", 1024, 4, 4) == cb.Layout(size=1024, count=64, send_numel=64, recv_numel=256)
    assert cb.layout("reduce_scatter", 1024, 4, 4) == cb.Layout(size=1024, count=64, send_numel=256, recv_numel=64)
    assert cb.layout("all_to_all", 1024, 4, 4) == cb.Layout(size=1024, count=64, send_numel=256, recv_numel=256)
    assert cb.layout("broadcast", 1024, 4, 4).count == 256
    # each rank's share rounds down to whole 16-byte units, as NVIDIA/nccl-tests src/all_gather.cu
    # (and reduce_scatter.cu, alltoall.cu) align the per-rank count: 256 / 3 = 85 -> 84 floats
    assert cb.layout("all_gather", 1024, 4, 3) == cb.Layout(size=84 * 3 * 4, count=84, send_numel=84, recv_numel=252)
    # 6 ranks, 1 MiB of float32: 262144 / 6 = 43690.67 -> 43688 floats (16-byte units), size = count x 6 x 4
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        lay = cb.layout(op, 2**20, 4, 6)
        assert (lay.count, lay.size) == (43688, 43688 * 6 * 4)
    # half: 8 elements per 16 bytes; 6 ranks at 96 B = 48 halves -> 8 per rank
    assert cb.layout("all_gather", 96, 2, 6).count == 8 and cb.layout("all_gather", 95, 2, 6).count == 0
    assert cb.layout("all_gather", 64, 8, 3).count == 2  # double: 2 elements per 16 bytes
    assert cb.layout("all_reduce", 10, 4, 2).size == 8
    assert cb.layout("all_gather", 8, 4, 4).count == 0


def _record(op="all_gather", size=1024, count=128, oop=(12.5, 0.08, 0.04, 0), ip=(150.0, 0.01, 0.005, 0)):
    record = {"op": op, "world_size": 2, "backend": "gloo", "device": "cpu", "size": size, "count": count,
              "type": "float", "redop": "none", "root": -1, "iters": 20, "warmup": 5, "time_across_ranks": "avg"}
    for mode, values in (("oop", oop), ("ip", ip)):
        for key, value in zip(("time_us", "algbw", "busbw", "wrong"), values or (None,) * 4):
            record[f"{mode}_{key}"] = value
    return record


def test_format_follows_nccl_tests_layout():
    records = [_record(), _record(size=2048, count=256, oop=(12345.6, 0.2, 0.1, 0), ip=(5.5, 0.3, 0.15, None))]
    lines = cb.format_nccl_tests(records).splitlines()
    header = [line for line in lines if line.startswith("#")]
    rows = [line for line in lines if not line.startswith("#")]
    assert any("out-of-place" in line and "in-place" in line for line in header)
    columns = next(line for line in header if "#wrong" in line).split()[1:]
    assert columns == ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                       "time", "algbw", "busbw", "#wrong"]
    assert rows[0] == ("        1024           128     float    none      -1"
                       "    12.50    0.08    0.04      0    150.0    0.01    0.01      0")
    assert rows[1].split()[5:] == ["12346", "0.20", "0.10", "0", "5.50", "0.30", "0.15", "N/A"]
    assert lines[-3] == "# Out of bounds values : 0 OK"
    assert lines[-2].split(":")[0] == "# Avg bus bandwidth    "
    assert float(lines[-2].split(":")[1]) == pytest.approx((0.04 + 0.005 + 0.1 + 0.15) / 4)


def test_format_header_names_the_statistic_over_iterations():
    assert "time: mean over iters, avg over ranks" in cb.format_nccl_tests([_record()])
    median = dict(_record(), stat="median", time_across_ranks="max")
    assert "time: median over iters, max over ranks" in cb.format_nccl_tests([median])
    both = cb.format_nccl_tests([_record(), median])  # one block per statistic
    assert both.count("# labutils collective benchmark") == 2


def test_format_marks_missing_modes_and_failed_checks():
    records = [_record(op="all_reduce", oop=None, ip=(10.0, 1.0, 1.0, 3))]
    text = cb.format_nccl_tests(records)
    row = next(line for line in text.splitlines() if not line.startswith("#"))
    assert row.split()[5:9] == ["N/A"] * 4
    assert "no out-of-place all_reduce" in text
    assert "# Out of bounds values : 1 FAILED" in text
    with pytest.raises(ValueError, match="no records"):
        cb.format_nccl_tests([])


def test_alpha_beta_points_and_fit():
    alpha, beta = 20e-6, 1 / 5e9
    sizes = [1024, 65536, 2**20, 2**24]
    records = [_record(op="all_reduce", size=s, oop=None,
                       ip=(costmodel.collective_time("all_reduce", "ring", s, 2, alpha, beta) * 1e6, 0, 0, 0))
               for s in sizes]
    points = cb.alpha_beta_points(records)
    assert points[0] == sizes
    assert points[1] == pytest.approx([r["ip_time_us"] * 1e-6 for r in records])
    fit = cb.fit_alpha_beta(records)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6) and fit.beta == pytest.approx(beta, rel=1e-6)
    relative = cb.fit_alpha_beta(records, weighting="relative")
    assert relative.weighting == "relative" and relative.alpha == pytest.approx(alpha, rel=1e-6)
    with pytest.raises(ValueError, match="no oop"):
        cb.alpha_beta_points(records, mode="oop")
    with pytest.raises(ValueError, match="one collective"):
        cb.alpha_beta_points(records + [_record()])


def test_options_are_checked_before_any_rank_starts():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        cb.collective_bench("allreduce", 2)
    with pytest.raises(ValueError, match="root"):
        cb.collective_bench("broadcast", 2, root=2)
    with pytest.raises(ValueError, match="avg"):
        cb.collective_bench("all_reduce", 2, dtype="int32", redop="avg")
    with pytest.raises(ValueError, match="2 ranks"):
        cb.collective_bench("sendrecv", 1)
    with pytest.raises(ValueError, match="larger than max"):
        cb.collective_bench("all_reduce", 2, "1M", "8")
    with pytest.raises(ValueError, match="iters"):
        cb.collective_bench("all_reduce", 2, iters=0)
    with pytest.raises(ValueError, match="unknown option"):
        cb.collective_bench("all_reduce", 2, itrs=5)
    with pytest.raises(ValueError, match="stat must be one of mean, median, min"):
        cb.collective_bench("all_reduce", 2, stat="average")


def test_core_needs_a_process_group():
    with pytest.raises(RuntimeError, match="initialised process group"):
        cb.run_collective_bench("all_reduce")


# ----- on 2 gloo ranks ------------------------------------------------------------------

@pytest.mark.parametrize("op", cb.OPS)
def test_every_collective_is_correct_and_consistent(pool, op):
    records = cb.collective_bench(op, pool=pool, min_bytes=64, max_bytes="1K", factor=4, iters=2)
    assert [r["size"] for r in records] == [64, 256, 1024]
    expected_modes = {"all_reduce": ("ip",), "broadcast": ("ip",), "all_to_all": ("oop",),
                      "sendrecv": ("oop",)}.get(op, ("oop", "ip"))
    for r in records:
        assert RECORD_KEYS <= set(r)
        assert (r["world_size"], r["backend"], r["type"]) == (2, "gloo", "float")
        assert r["count"] == cb.layout(op, r["size"], 4, 2).count
        for mode in ("oop", "ip"):
            if mode not in expected_modes:
                assert r[f"{mode}_time_us"] is None and r[f"{mode}_wrong"] is None
                continue
            assert r[f"{mode}_wrong"] == 0
            algbw = r["size"] / (r[f"{mode}_time_us"] * 1e-6) / 1e9
            assert r[f"{mode}_algbw"] == pytest.approx(algbw)
            assert r[f"{mode}_busbw"] == pytest.approx(algbw * cb.bus_bandwidth_factor(op, 2))


@pytest.mark.parametrize("dtype, redop", [("bfloat16", "sum"), ("half", "prod"), ("int8", "max"),
                                          ("double", "avg"), ("int32", "min")])
def test_reductions_check_every_dtype_and_redop(pool, dtype, redop):
    for op in ("all_reduce", "reduce_scatter"):
        (record,) = cb.collective_bench(op, pool=pool, min_bytes=256, max_bytes=256, iters=1, dtype=dtype, redop=redop)
        assert record["redop"] == redop
        assert record["ip_wrong"] == 0


def test_broadcast_reports_its_root(pool):
    (record,) = cb.collective_bench("broadcast", pool=pool, min_bytes=128, max_bytes=128, iters=1, root=1)
    assert record["root"] == 1 and record["ip_wrong"] == 0


def _gather_that_drops_data():
    """Run the benchmark with an all_gather that writes nothing: the check must notice."""
    import torch.distributed as dist

    real = dist.all_gather_into_tensor
    dist.all_gather_into_tensor = lambda output, input, **kwargs: None
    try:
        return cb.run_collective_bench("all_gather", 1024, 1024, iters=1)
    finally:
        dist.all_gather_into_tensor = real


def test_the_check_counts_wrong_elements(pool):
    (record,) = pool.run(_gather_that_drops_data)[0]
    # 256 float32 elements per output, both ranks, pattern (i mod 97): the zeros left behind are wrong
    # except where the expected value is itself 0 (i = 0, 97, 194)
    assert record["oop_wrong"] == 2 * (256 - 3)
    assert 0 < record["ip_wrong"] < record["oop_wrong"]  # in place, each rank's own share is already there
    assert "FAILED" in cb.format_nccl_tests([record])


def _combine_rank_numbers(how):
    import torch
    import torch.distributed as dist

    return cb._across_ranks(float(dist.get_rank() + 1), how, torch.device("cpu"))


@pytest.mark.parametrize("how, expected", [("avg", 1.5), ("max", 2.0), ("min", 1.0), ("rank0", 1.0)])
def test_times_combine_across_ranks(pool, how, expected):
    assert pool.run(_combine_rank_numbers, how) == [expected, expected]


def test_one_shot_launch_and_fit():
    records = cb.collective_bench("all_reduce", 2, 1024, "64K", 8, backend="gloo", iters=3)
    assert [r["size"] for r in records] == [1024, 8192, 65536]
    fit = cb.fit_alpha_beta(records)
    assert fit.world_size == 2 and fit.alpha >= 0 and fit.beta >= 0


def test_fit_defaults_to_each_ops_algorithm():
    sizes = [1024, 65536, 2**20]
    for op, algorithm in (("all_to_all", "pairwise"), ("sendrecv", "point_to_point")):
        records = [_record(op=op, size=s, ip=None,
                           oop=(costmodel.collective_time(op, algorithm, s, 2, 10e-6, 1e-9) * 1e6, 0, 0, 0))
                   for s in sizes]
        fit = cb.fit_alpha_beta(records)
        assert (fit.op, fit.algorithm) == (op, algorithm)
        assert fit.alpha == pytest.approx(10e-6) and fit.beta == pytest.approx(1e-9)


class _StallingCase:
    """Stands in for a benchmark case: call i sleeps ``delays[i]`` seconds (one long stall)."""

    def __init__(self, delays):
        import torch

        self.device = torch.device("cpu")
        self.delays = list(delays)

    def call(self, mode):
        calls = iter([0.0] + self.delays)  # the first call is _time_mode's untimed one

        def run():
            time.sleep(next(calls))
        return run


def _time_with_stat(stat):
    return cb._time_mode(_StallingCase([0.002, 0.002, 0.1, 0.002, 0.002]), "oop", 5, "avg", stat)


def test_median_and_min_ignore_a_stall_the_mean_counts(pool):
    # each stat times its own run of the five calls, so compare each with the stall, not with one another
    mean, median, fastest = (pool.run(_time_with_stat, stat)[0] for stat in cb.STATS)
    assert mean >= (4 * 0.002 + 0.1) / 5
    assert 0.002 <= median < 0.05 and 0.002 <= fastest < 0.05


def test_stat_is_recorded(pool):
    records = cb.collective_bench("all_reduce", pool=pool, min_bytes=64, max_bytes=256, factor=4, iters=3,
                                  stat="median")
    assert [r["stat"] for r in records] == ["median", "median"]
    assert all(r["ip_time_us"] > 0 and r["ip_wrong"] == 0 for r in records)
    assert "time: median over iters" in cb.format_nccl_tests(records)


def test_fit_says_alpha_includes_torchs_per_call_cost():
    sizes = [1024, 65536, 2**20]
    records = [_record(op="all_reduce", size=s, oop=None,
                       ip=(costmodel.collective_time("all_reduce", "ring", s, 2, 30e-6, 1e-9) * 1e6, 0, 0, 0))
               for s in sizes]
    fit = cb.fit_alpha_beta(records)
    assert isinstance(fit, costmodel.AlphaBetaFit) and fit.alpha == pytest.approx(30e-6)
    assert fit.note == cb.ALPHA_NOTE and "per-call CPU cost" in str(fit) and "alpha = 30.00 us" in str(fit)
    assert "nccl-tests -G" in cb.format_nccl_tests(records)


def test_check_in_chunks_matches_the_whole_answer(monkeypatch):
    import torch

    from labutils.measure import _collectives_check as check

    monkeypatch.setattr(check, "CHUNK_ELEMENTS", 7)  # many chunks, none aligned with the period of 4
    for redop in cb.REDOPS:
        for dtype in (torch.float32, torch.int8):
            if redop == "avg" and not dtype.is_floating_point:
                continue
            table = check.reduction_table(redop, 6, dtype, "cpu")
            inputs = torch.stack([check.summand(r, 50, torch.float64, "cpu", offset=13) for r in range(6)])
            whole = {"sum": inputs.sum(0), "avg": inputs.mean(0), "prod": inputs.prod(0),
                     "max": inputs.amax(0), "min": inputs.amin(0)}[redop]
            got = check.reduced(table, 13, 50)
            want = whole.to(torch.int64).to(dtype) if not dtype.is_floating_point else whole.to(dtype)
            assert torch.equal(got, want), (redop, dtype)
    target = torch.zeros(50)
    check.fill(target, lambda start, length: check.pattern(start, length, torch.float32, "cpu"))
    assert torch.equal(target, check.pattern(0, 50, torch.float32, "cpu"))
    target[[3, 20, 49]] = -1.0
    assert check.count_wrong(target, lambda start, length: check.pattern(start, length, torch.float32, "cpu")) == 3


def test_in_place_only_ops_allocate_no_send_buffer():
    import torch

    from labutils.measure._collectives_check import Case

    for op in ("all_reduce", "broadcast"):
        lay = cb.layout(op, 4096, 4, 8)
        case = Case(op, lay, torch.float32, "sum", 0, 0, 8, torch.device("cpu"))
        assert case.send is None and case.recv.numel() == 1024
    gather = Case("all_gather", cb.layout("all_gather", 4096, 4, 8), torch.float32, "sum", 0, 0, 8,
                  torch.device("cpu"))
    assert gather.send.numel() == 128 and gather.recv.numel() == 1024


def test_records_carry_every_ranks_peak_memory(pool):
    records = pool.run(cb.run_collective_bench, "all_reduce", 1024, 4096, 4, iters=2)[0]
    assert len(records[0]["peak_rss_bytes"]) == 2 and all(peak >= 0 for peak in records[0]["peak_rss_bytes"])
    assert "# Peak host memory per rank (max RSS above the baseline after import" in cb.format_nccl_tests(records)
    assert records[0]["warmup"] == cb.DEFAULT_WARMUP == 1
