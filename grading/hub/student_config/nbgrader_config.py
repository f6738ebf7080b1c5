"""nbgrader for a student's server on the course hub: the exchange and the course's id.

The hub points ``JUPYTER_CONFIG_PATH`` here; ``COURSE_EXCHANGE`` and ``COURSE_ID`` come from
``grading/hub/course_hub.toml``. Validate runs every cell and fails on any error, so an
unwritten part (its answer still raises NotImplementedError) never validates.
"""
import os

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.Exchange.root = os.environ["COURSE_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["COURSE_ID"]
c.Validator.validate_all = True
