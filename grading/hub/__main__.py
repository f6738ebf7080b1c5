"""``python -m grading.hub``: the same as ``course hub``."""
import sys

from grading.cli import main

sys.exit(main(["hub", *sys.argv[1:]]))
