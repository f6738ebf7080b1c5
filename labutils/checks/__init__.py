"""Self-checks for the chapters' exercises and the labs' visible tests: one call each.

A chapter's exercise cell ends with one call such as ``check.busbw(answer_1)`` that prints a
one-line verdict (correct, a named mistake, or "not answered yet"); a lab's visible test
raises :class:`CheckFailed` with one line saying what differs on which rank. The checks live
here, tested once, so a notebook cell shows the student's answer and not the solution; read
one with ``??`` to see how it judges. What every check shares (reading the answer, "not
answered yet", matching the named mistakes) is in :mod:`labutils.checks.answers`.

One module per topic; a notebook imports the one it needs::

    from labutils.checks import collectives as check

Modules, by chapter: ``metrics`` (1), ``gpu`` and ``fp8`` (2), ``roofline`` (3),
``interconnects`` (4), ``collectives`` (5), ``data_parallel`` (6), ``zero`` (7),
``tensor_parallel`` and ``long_sequences`` (8), ``pipeline`` (9), ``strategy`` and
``comm_bound`` (10). The labs': ``labs`` (the visible tests' comparisons) and ``labcheck``
(``labutils check LAB.ipynb``, part by part) and ``notebook_kernel`` (the Jupyter kernel it and the
nightly run a notebook in). Shared: ``answers`` and ``base`` (``CheckFailed``).
"""
from labutils.checks.base import CheckFailed

__all__ = ["CheckFailed"]
