"""nbgrader for an instructor's server on the course hub: the exchange and the course's id.

Release, collect and feedback go through the same exchange as the students' servers; the
course folder (``CourseDirectory.root``) is given on the command line (see grading/README.md).
"""
import os

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.Exchange.root = os.environ["COURSE_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["COURSE_ID"]
