"""Where the course's folders are, for the browser tests."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
LABS = REPO / "labs"
#: Screenshots and the server log (gitignored).
ARTIFACTS = REPO / "test-artifacts" / "browser"
