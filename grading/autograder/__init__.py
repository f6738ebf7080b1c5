"""Class-scale grading on top of nbgrader, driven by ``course grade``.

- ``runner``: autograde a folder of submissions in parallel, one warm judge per worker;
  then trust the judge's verdicts over the notebooks', write feedback and grades.csv
- ``sandbox``: the bubblewrap sandbox each submission's kernel (and every rank it starts) runs in,
  and that of the judge's ranks; ``rank_guard``: their template deletes the staged grader, then becomes the plain template
- ``execute``: nbgrader's Execute preprocessor, surviving a kernel that dies
- ``feedback``: the feedback preprocessor that removes hidden tests and their tracebacks
- ``tampering``: which graded or read-only cells a submission edited or deleted
- ``report``: the instructor's report (Markdown and JSON)
- ``course``: the nbgrader course folder, built one way for ``course grade``, ``course release``
  and the nightly check of the labs
- ``worker``, ``judge_service``: the autograde worker and the warm judge, each a process started
  ``python -E -s -m ...`` in the course root (``grading.paths``)
- ``nbgrader_cli``: nbgrader's API and command line; ``fixtures``: wrong implementations for tests
"""
