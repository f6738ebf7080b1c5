"""Chapter 1's self-checks (labutils.checks.metrics): the right answer passes, each named
mistake gets its message, and non-answers are handled."""
from __future__ import annotations

import pytest

from labutils.checks import metrics as check

# The exercises' numbers, worked out here by hand (not with labutils).
MFU = 8000 * (6 * 7e9 + 12 * 32 * 4096 * 4096) / 989e12           # PaLM's formula, H100 dense BF16
SCALING = 48_000 / (64 * 1_000)
JOB_MTBF_H = 50_000 / 4096
AVAILABILITY = JOB_MTBF_H / (JOB_MTBF_H + 0.5)
PCIE_MS = 1e9 / (16e9 * 16 * 128 / 130 / 8) * 1e3                 # Gen4 x16, one direction


@pytest.mark.parametrize("verdict, answer", [
    (check.mfu_verdict, MFU), (check.scaling_verdict, SCALING),
    (check.availability_verdict, AVAILABILITY), (check.pcie_verdict, PCIE_MS)])
def test_right_answers_pass(verdict, answer):
    assert verdict(answer).startswith("correct")


@pytest.mark.parametrize("verdict", [check.mfu_verdict, check.scaling_verdict,
                                     check.availability_verdict, check.pcie_verdict])
def test_non_answers(verdict):
    assert verdict(None) == "not answered yet"
    assert verdict("0.5").startswith("give a number")
    assert verdict(True).startswith("give a number")
    assert verdict(float("nan")).startswith("give a finite number")
    assert verdict(123456.0).startswith("not 123456.0")


@pytest.mark.parametrize("answer, message", [
    (MFU / 2, "sparse peak"),
    (8000 * 6 * 7e9 / 989e12, "only 6N"),
    (100 * MFU, "fraction"),
])
def test_mfu_mistakes(answer, message):
    assert message in check.mfu_verdict(answer)


@pytest.mark.parametrize("answer, message", [
    (1 / SCALING, "upside down"), (48, "speed-up"), (100 * SCALING, "fraction")])
def test_scaling_mistakes(answer, message):
    assert message in check.scaling_verdict(answer)


@pytest.mark.parametrize("answer, message", [
    (50_000 / 50_000.5, "one GPU's MTBF"),
    (JOB_MTBF_H / (JOB_MTBF_H + 30), "same unit"),
    (100 * AVAILABILITY, "fraction")])
def test_availability_mistakes(answer, message):
    assert message in check.availability_verdict(answer)


@pytest.mark.parametrize("answer, message", [
    (PCIE_MS / 2, "both directions"),
    (2**30 / 1e9 * PCIE_MS, "GiB"),
    (PCIE_MS / 1e3, "seconds")])
def test_pcie_mistakes(answer, message):
    assert message in check.pcie_verdict(answer)


def test_checks_print_one_line(capsys):
    check.mfu(MFU)
    check.scaling(None)
    check.availability(AVAILABILITY)
    check.pcie(PCIE_MS / 2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("correct") and lines[1] == "not answered yet"
    assert lines[2].startswith("correct") and "both directions" in lines[3]


def test_rounded_answers_pass():
    assert check.availability_verdict(0.96).startswith("correct")
    assert check.pcie_verdict(32).startswith("correct")
    assert check.mfu_verdict(round(MFU, 2)).startswith("correct")
