"""labutils.costmodel.schedules: schedules, simulated timelines, bubble formulas (single process)."""
import pytest

from labutils.costmodel import schedules as ps
from labutils.costmodel.schedules import Action


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_measured_bubble_equals_the_formula(name):
    timeline = ps.simulate(ps.build_schedule(name, 4, 16), t_forward=1.0, t_backward=2.0, name=name)
    assert timeline.bubble_fraction() == pytest.approx(3 / 19)
    assert ps.bubble_formula(name, 4, 16) == pytest.approx({"of_total": 3 / 19, "relative_to_ideal": 3 / 16})
    assert timeline.makespan == pytest.approx((16 + 3) * 3.0)


@pytest.mark.parametrize("p, m", [(2, 2), (3, 5), (4, 4), (8, 32)])
def test_gpipe_and_1f1b_share_the_bubble_for_any_p_m(p, m):
    expected = (p - 1) / (m + p - 1)
    for name in ("gpipe", "1f1b"):
        assert ps.simulate(ps.build_schedule(name, p, m)).bubble_fraction() == pytest.approx(expected)


def test_1f1b_caps_activations_at_p_gpipe_holds_m():
    assert ps.simulate(ps.build_schedule("1f1b", 4, 16)).peak_in_flight() == [4, 3, 2, 1]
    assert ps.simulate(ps.build_schedule("gpipe", 4, 16)).peak_in_flight() == [16] * 4
    assert max(ps.simulate(ps.build_schedule("1f1b", 8, 5)).peak_in_flight()) <= 8


@pytest.mark.parametrize("p, m", [(2, 1), (4, 3), (4, 16), (8, 5), (8, 64)])
def test_1f1b_never_holds_more_than_p_microbatches(p, m):
    peaks = ps.simulate(ps.build_schedule("1f1b", p, m), t_forward=1.0, t_backward=2.0).peak_in_flight()
    assert peaks == [min(p - rank, m) for rank in range(p)] and max(peaks) <= p
    assert ps.simulate(ps.build_schedule("gpipe", p, m)).peak_in_flight() == [m] * p


def test_1f1b_rank_0_order():
    assert [str(a) for a in ps.build_schedule("1f1b", 4, 6)[0]] == \
        "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5".split()
    assert [str(a) for a in ps.build_schedule("1f1b", 4, 6)[3]] == \
        "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5".split()


def test_naive_runs_one_stage_at_a_time():
    timeline = ps.simulate(ps.build_schedule("naive", 4, 3))
    assert timeline.bubble_fraction() == pytest.approx(3 / 4)
    assert ps.bubble_formula("naive", 4, 3)["of_total"] == pytest.approx(3 / 4)
    spans = sorted((e.start, e.end) for e in timeline.events)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # never two at once


@pytest.mark.parametrize("p, m, v", [(4, 8, 2), (4, 16, 2), (2, 4, 3), (4, 4, 2), (3, 6, 4)])
def test_interleaved_bubble_is_p_minus_1_over_v_m_relative_to_ideal(p, m, v):
    timeline = ps.simulate(ps.build_schedule("interleaved_1f1b", p, m, v), t_forward=1.0 / v, t_backward=2.0 / v)
    ideal = m * 3.0
    idle_per_rank = timeline.makespan - ideal
    assert idle_per_rank / ideal == pytest.approx((p - 1) / (v * m))
    formula = ps.bubble_formula("interleaved_1f1b", p, m, v)
    assert formula["relative_to_ideal"] == pytest.approx((p - 1) / (v * m))
    assert timeline.bubble_fraction() == pytest.approx(formula["of_total"])


def test_interleaving_shrinks_the_bubble():
    plain = ps.simulate(ps.build_schedule("1f1b", 4, 8)).bubble_fraction()
    interleaved = ps.simulate(ps.build_schedule("interleaved_1f1b", 4, 8, 2), 0.5, 1.0).bubble_fraction()
    assert interleaved < plain


def test_events_respect_dependencies_with_transfer_time():
    timeline = ps.simulate(ps.build_schedule("1f1b", 3, 4), t_transfer=0.5)
    end = {(e.rank, e.kind, e.microbatch): e.end for e in timeline.events}
    for e in timeline.events:
        if e.kind == "F" and e.rank > 0:
            assert e.start >= end[(e.rank - 1, "F", e.microbatch)] + 0.5
        if e.kind == "B" and e.rank < 2:
            assert e.start >= end[(e.rank + 1, "B", e.microbatch)] + 0.5
    assert timeline.makespan > ps.simulate(ps.build_schedule("1f1b", 3, 4)).makespan


def test_timeline_fields():
    timeline = ps.simulate(ps.build_schedule("gpipe", 2, 3))
    assert (timeline.num_stages, timeline.num_microbatches, timeline.num_chunks, timeline.name) == (2, 3, 1, "gpipe")
    assert ps.simulate(ps.build_schedule("gpipe", 2, 3), name="mine").name == "mine"
    assert ps.simulate([[Action("F", 0), Action("B", 0)]]).name is None
    assert len(timeline.events) == 2 * 2 * 3
    assert timeline.busy_time() == [9.0, 9.0]


def test_deadlock_names_the_stuck_ranks():
    # rank 0 runs naive order (B0 before F1), rank 1 runs GPipe order (F1 before B0)
    bad = [[Action("F", 0), Action("B", 0), Action("F", 1), Action("B", 1)],
           [Action("F", 0), Action("F", 1), Action("B", 0), Action("B", 1)]]
    with pytest.raises(ValueError, match=r"deadlocks: rank 0 at B0 \(waits for B0 on rank 1\); "
                                         r"rank 1 at F1 \(waits for F1 on rank 0\)"):
        ps.simulate(bad)
    bad[1] = bad[0]
    assert ps.simulate(bad).bubble_fraction() == pytest.approx(1 / 2)  # consistent order: fine


def test_incomplete_schedule_is_rejected():
    with pytest.raises(ValueError, match="rank 1 is missing B0"):
        ps.simulate([[Action("F", 0), Action("B", 0)], [Action("F", 0)]])
    with pytest.raises(ValueError, match="twice"):
        ps.simulate([[Action("F", 0), Action("F", 0), Action("B", 0)]])


def test_bad_arguments():
    with pytest.raises(ValueError, match="naive, gpipe, 1f1b, interleaved_1f1b"):
        ps.build_schedule("zb-h1", 4, 8)
    with pytest.raises(ValueError, match="multiple of num_stages"):
        ps.build_schedule("interleaved_1f1b", 4, 6, 2)
    with pytest.raises(ValueError, match="interleaved_1f1b"):
        ps.build_schedule("1f1b", 4, 8, 2)
    with pytest.raises(ValueError, match="num_stages"):
        ps.build_schedule("gpipe", 0, 8)
    with pytest.raises(ValueError, match="'F' or 'B'"):
        Action("W", 0)
