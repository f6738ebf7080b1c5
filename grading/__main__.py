"""``python -m grading``: the ``course`` command."""
import sys

from grading.cli import main

sys.exit(main())
