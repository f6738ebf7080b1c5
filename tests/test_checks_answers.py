"""labutils.checks.answers: how every self-check reads an answer and matches it to a message."""
from __future__ import annotations

import math

import numpy as np
import pytest

from labutils.checks import answers


@pytest.mark.parametrize("answer", [0, 3, -2.5, 1e9, np.float64(0.25), np.int64(7)])
def test_a_finite_real_number_can_be_judged(answer):
    assert answers.number_problem(answer) is None


@pytest.mark.parametrize("answer, message", [
    (None, "not answered yet"),
    ("42", "give a number, not '42'"),
    (True, "give a number, not True"),
    ([1.5], "give a number, not [1.5]"),
    (math.nan, "give a finite number, not nan"),
    (-math.inf, "give a finite number, not -inf"),
    (np.float64("inf"), "give a finite number, not inf"),
])
def test_number_problem_names_what_is_wrong(answer, message):
    assert answers.number_problem(answer) == message


def test_number_problem_speaks_of_the_unit_asked_for():
    what = "a number of bytes"
    assert answers.number_problem("12", what) == "give a number of bytes, not '12'"
    assert answers.number_problem("12", what, show_type=True) == "give a number of bytes, not str"
    assert answers.number_problem(False, what, show_type=True) == "give a number of bytes, not bool"
    assert answers.number_problem(math.nan, what, finite="a finite number of bytes") == \
        "give a finite number of bytes, not nan"


@pytest.mark.parametrize("answer, message", [
    (8, None), (8.0, None), (np.int64(8), None),
    (7.5, "give a whole number of GPUs, not 7.5"),
    ("8", "give a whole number of GPUs, not str"),
    (math.inf, "give a finite number, not inf"),
    (None, "not answered yet"),
])
def test_whole_number_problem(answer, message):
    assert answers.whole_number_problem(answer, "a whole number of GPUs") == message


@pytest.mark.parametrize("answer, message", [
    (0, None), (0.179, None), (1, None),
    (17.9, "give a fraction between 0 and 1, not a percentage (17.9% is 0.179)"),
    (-0.2, "a fraction lies between 0 and 1, not -0.2"),
    (250, "a fraction lies between 0 and 1, not 250"),
    ([0.5], "give a fraction between 0 and 1, not list"),
    (None, "not answered yet"),
])
def test_fraction_problem(answer, message):
    assert answers.fraction_problem(answer) == message


@pytest.mark.parametrize("answer, message", [
    (4.55e9, None), (123, None),
    (4.55, "right amount, wrong unit: give bytes, not GB (4.55 GB = 4,550,000,000 bytes)"),
    (4550, "right amount, wrong unit: give bytes, not MB (4550 MB = 4,550,000,000 bytes)"),
    ("4.55e9", "give a number of bytes, not str"),
    (None, "not answered yet"),
])
def test_bytes_problem_catches_gb_and_mb(answer, message):
    assert answers.bytes_problem(answer, expected=4.55e9) == message


@pytest.mark.parametrize("answer, message", [
    ("NIC0", None), ("", None),
    (None, "not answered yet"),
    (0, 'give the NIC\'s name as a string, e.g. "NIC0", not 0'),
    (["NIC0"], 'give the NIC\'s name as a string, e.g. "NIC0", not [\'NIC0\']'),
])
def test_name_problem(answer, message):
    assert answers.name_problem(answer, "the NIC's name", "NIC0") == message


CANDIDATES = [(100.0, "correct"), (50.0, "half"), (100.0, "never reached: the first match wins")]


@pytest.mark.parametrize("answer, message", [
    (100, "correct"), (100.9, "correct"), (99.1, "correct"), (50.4, "half"),
    (102, "otherwise"), (75, "otherwise"), (0, "otherwise"),
])
def test_first_match_takes_the_first_value_within_the_tolerance(answer, message):
    assert answers.first_match(answer, CANDIDATES, "otherwise") == message


def test_first_match_with_no_tolerance_asks_for_the_exact_number():
    assert answers.first_match(785, [(785, "correct")], "no", rel_tol=0) == "correct"
    assert answers.first_match(785.0001, [(785, "correct")], "no", rel_tol=0) == "no"
    assert answers.first_match(1.05, [(1.0, "correct")], "no", rel_tol=0.1) == "correct"


def test_close_is_relative():
    assert answers.close(1.004e9, 1e9) and not answers.close(1.02e9, 1e9)
    assert answers.close(1.02e9, 1e9, rel_tol=0.05)
