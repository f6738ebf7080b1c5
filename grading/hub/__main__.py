"""``python -m grading.hub``: the same as ``course hub``."""
import sys

from grading.hub.start import main

sys.exit(main())
