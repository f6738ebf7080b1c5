"""nbgrader configuration of the course: the instructor's, never released to students.

``solutions/`` is the source of every lab and ``labs/`` its release, wherever nbgrader runs.
Three ways it is used:

    cd grading && nbgrader generate_assignment lab01_tensor_parallel --force --no-db
    python grading/release.py lab01_tensor_parallel          # the same, in one command
    labutils grade lab01_tensor_parallel SUBMISSIONS          # its course folder loads this file

Besides nbgrader's defaults it sets: a longer cell timeout (ranks start in each check), test
and read-only cells that a student deleted are put back and run (``autograder.restore``), a
dead kernel does not void the submission (``autograder.execute``), and feedback never shows
hidden tests (``autograder.feedback``). It also tells the kernels where the judge lives
(``LAB_GRADING_DIR``), for the hidden-test cells.
"""
import os
import sys

GRADING_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(GRADING_DIR)
if GRADING_DIR not in sys.path:
    sys.path.insert(0, GRADING_DIR)
os.environ.setdefault("LAB_GRADING_DIR", GRADING_DIR)

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
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

from autograder.execute import ResilientExecute  # noqa: E402
from autograder.feedback import SanitizeHiddenTests  # noqa: E402
from autograder.restore import RestoreDeletedCells  # noqa: E402

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
