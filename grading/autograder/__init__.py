"""Class-scale grading on top of nbgrader, driven by ``course grade``.

- ``runner``: autograde a folder of submissions in parallel, one warm judge per worker;
  then trust the judge's verdicts over the notebooks', write feedback and grades.csv
- ``execute``: nbgrader's Execute preprocessor, surviving a kernel that dies
- ``feedback``: the feedback preprocessor that removes hidden tests and their tracebacks
- ``tampering``: which graded or read-only cells a submission edited or deleted
- ``report``: the instructor's report (Markdown and JSON)
"""
