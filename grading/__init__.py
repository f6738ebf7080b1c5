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
import sys as _sys

# jsonschema imports the rfc3987-syntax package when it is installed (jupyter_events'
# ``jsonschema[format-nongpl]`` installs it) to check the "iri" string format, and that package
# builds its grammar on import: about 1.7 s of CPU in every process that imports nbformat, nbgrader
# or papermill (measured on a 2-core machine: ``import nbgrader.apps, nbconvert`` 2.9 s, 1.1 s
# without it). No notebook or nbgrader schema uses that format, so every process of this package
# goes without it: importing it raises ImportError, which jsonschema skips. (Where another import
# brought it in first, nothing changes.)
_sys.modules.setdefault("rfc3987_syntax", None)
