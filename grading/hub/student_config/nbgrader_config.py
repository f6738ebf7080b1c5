"""nbgrader for a student's server on the course hub: the exchange and the course's id.

The hub points ``JUPYTER_CONFIG_PATH`` here; ``COURSE_EXCHANGE`` and ``COURSE_ID`` come from
``grading/hub/course_hub.toml``. Validate runs every cell and fails on any error, so an
unwritten part (its answer still raises NotImplementedError) never validates. Fetch Feedback
before the instructor released any says so instead of doing nothing.
"""
import os

c = get_config()  # noqa: F821 (defined by traitlets when it loads this file)
c.Exchange.root = os.environ["COURSE_EXCHANGE"]
c.CourseDirectory.course_id = os.environ["COURSE_ID"]
c.Validator.validate_all = True


from nbgrader.exchange.abc.exchange import ExchangeError  # noqa: E402 (after the settings above)
from nbgrader.exchange.default import ExchangeFetchFeedback  # noqa: E402


class FetchFeedbackOrSayWhy(ExchangeFetchFeedback):
    """Fetch Feedback that tells the student when there is none yet (nbgrader's fetches nothing
    and says nothing); the Assignment List shows the message."""

    def copy_files(self):
        if not self.feedback_files:
            raise ExchangeError(f"No feedback for {self.coursedir.assignment_id} yet: your instructor has not "
                                "released it. Fetch Feedback again once they have.")
        super().copy_files()


c.ExchangeFactory.fetch_feedback = FetchFeedbackOrSayWhy
