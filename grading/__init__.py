"""The instructors' package of the course: the graded labs' reference kernels, judge and autograder,
and the tools that release, grade and check the course (never given to students).

    course release lab01_tensor_parallel          # labs/LAB from solutions/LAB (grading.release)
    course grade lab01_tensor_parallel SUBMISSIONS --workers 4   # (grading.grade)
    course nightly                                # every notebook and lab, with a report (grading.nightly)
    python -m grading ...                         # the same command

- ``reference``: the reference kernels, one parallelism per module
- ``judge``: the hidden tests, run in an isolated process (``from grading.judge import judge``)
- ``autograder``: parallel nbgrader grading, one sandboxed kernel per submission
- ``nightly``: the papermill run of every notebook, the nbgrader check of every lab, the report

Students use the ``labutils`` package and command; ``grading`` imports ``labutils``, never the
reverse. See ``grading/README.md`` for the instructor guide.
"""
