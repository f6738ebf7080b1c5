"""What the judge's ranks run, pickled here: no grader module is ever imported on a rank.

The ranks fork from labutils' rank template, a plain interpreter that has imported torch and
labutils and nothing of ``grading`` (in ``course grade`` no file of it is even visible there).
Each rank receives one *program*: the bytes of a pickle whose last step calls a harness function
(``rankside.run_reference`` or ``rankside.run_submission``) with its arguments; the rank calls
``RUN`` (``pickle.loads``) on it. The grader's functions and classes in it travel by value
(cloudpickle, ``grading`` registered by value while the program is written), each with the
globals it names and nothing more, so a rank holds exactly the code its launch needs:

- a reference launch: the harness, the test's rank code (``TestSpec.run_case``) and the lab's
  reference objects;
- a submission's launch: the harness, the test's rank code, the reference objects the test lends
  (``TestSpec.substitutes``: the parts it does not grade) and the submission's own blob. The
  lab's other reference objects and every test's dense maths (``expected``) are *refused*: a
  program that would carry one is not written (``ShippingRefused``, a fault of the judge).

A grader module object is refused in every program (cloudpickle would copy its whole namespace):
the rank code names what it uses (``from grading.judge.recording import install``).
"""
from __future__ import annotations

import functools
import io
import operator
import pickle
import types

import cloudpickle

import grading

#: What every rank calls with its program (captured here, before the judge patches ``pickle.loads``).
RUN = pickle.loads
GRADER_PACKAGE = grading.__name__


class ShippingRefused(RuntimeError):
    """A program for the ranks would have carried grader code it must not carry."""


class _Call:
    """Unpickled as ``fn(*args)``: the program's last step."""

    def __init__(self, fn, args: tuple):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


class _ProgramPickler(cloudpickle.Pickler):
    def __init__(self, file, refused: dict):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._refused = refused

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0] == GRADER_PACKAGE:
            raise ShippingRefused(f"the ranks' code names the module {obj.__name__}: import the names it uses")
        label = self._refused.get(id(obj))
        if label is not None:
            raise ShippingRefused(f"a submission's ranks would receive the grader's {label}")
        return super().reducer_override(obj)


def _dump(obj, refused: dict | None) -> bytes:
    """``obj`` pickled with the grader's code by value; ``refused`` objects and grader modules refused."""
    buffer = io.BytesIO()
    cloudpickle.register_pickle_by_value(grading)
    try:
        _ProgramPickler(buffer, refused or {}).dump(obj)
    finally:
        cloudpickle.unregister_pickle_by_value(grading)
    return buffer.getvalue()


def program(fn, args: tuple, refused: dict | None = None) -> bytes:
    """The bytes that, loaded by ``RUN`` on a rank, call ``fn(*args)`` there and give its result.
    ``refused``: {id(object): label} of objects the program may not carry (``ShippingRefused``)."""
    return _dump(_Call(fn, args), refused)


def programs(fn, shared: tuple, per_rank: list, refused: dict | None = None, **keywords) -> list:
    """Per rank r, the program that calls ``fn(*shared, *per_rank[r], **keywords)``: what every rank
    gets alike (the harness, the rank code, the objects, the blob) is written once, as bytes that
    each rank's program loads (``RUN``) before the call, and only ``per_rank[r]`` once per rank."""
    common = _dump(functools.partial(fn, *shared, **keywords), refused)
    loader = _Call(RUN, (common,))  # on the rank: the partial, loaded from the common bytes
    return [program(operator.call, (loader, *args), refused) for args in per_rank]


def graded_objects(module, spec) -> dict:
    """{id: label} of what a submission's launch of ``spec`` (a test of the lab ``module``) must not
    receive: every reference object but the ones the test lends, every test's functions that run
    in the judge (its dense maths above all), and the lab's tables of them."""
    lent = {id(module.REFERENCE[name]) for name in spec.substitutes}
    refused = {id(obj): f"reference {name}" for name, obj in module.REFERENCE.items() if id(obj) not in lent}
    for test, other in module.TESTS.items():
        for role in ("expected", "make_cases", "measure", "rank_data"):
            function = getattr(other, role)
            if function is not None:
                refused[id(function)] = f"{role} of {test}"
    refused[id(module.REFERENCE)] = "table of reference objects"
    refused[id(module.TESTS)] = "table of hidden tests"
    return refused
