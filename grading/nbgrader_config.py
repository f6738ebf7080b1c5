"""nbgrader configuration of the course: the instructor's, never released to students.

``solutions/`` is the source of every lab and ``labs/`` its release, wherever nbgrader runs.
Three ways it is used:

    cd grading && nbgrader generate_assignment lab01_tensor_parallel --force --no-db
    course release lab01_tensor_parallel           # the same, in one command
    course grade lab01_tensor_parallel SUBMISSIONS  # its course folder loads this file

Besides nbgrader's defaults it sets: a longer cell timeout (ranks start in each check), test
and read-only cells that a student deleted are put back and run (``autograder.restore``), a
dead kernel does not void the submission (``autograder.execute``), and feedback never shows
hidden tests (``autograder.feedback``). nbgrader must import the ``grading`` package (the
course's editable install, or ``course grade``, which runs nbgrader in the course root); the
kernels it starts get the course root first on their PYTHONPATH, so the hidden-test cells'
``from grading.judge import judge`` finds this course's judge.
"""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    OverwriteKernelspec,
    SaveAutoGrades,
)

from grading.autograder.execute import ResilientExecute
from grading.autograder.feedback import SanitizeHiddenTests, configure_feedback_page
from grading.autograder.restore import RestoreDeletedCells
from grading.paths import with_course_on_pythonpath

REPO_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.update(with_course_on_pythonpath(dict(os.environ), REPO_DIR))  # for the kernels nbgrader starts

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)

c.CourseDirectory.source_directory = os.path.join(REPO_DIR, "solutions")
c.CourseDirectory.release_directory = os.path.join(REPO_DIR, "labs")

# Seconds a cell may run before the kernel is interrupted (its score is then zero).
c.Execute.timeout = 300
# Deleted test and read-only cells come back (and run) instead of a test cell being left for
# manual grading and a read-only one forgotten.
c.OverwriteCells.add_missing_cells = True
c.Autograde.sanitize_preprocessors = [
    ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreDeletedCells, CheckCellMetadata,
]
c.Autograde.autograde_preprocessors = [
    ResilientExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, SanitizeHiddenTests]
configure_feedback_page(c)  # MathJax inside the page, parts named in its table of contents
