"""Where the course's folders are, and the window size, for the browser tests."""
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
LABS = REPO / "labs"
#: Screenshots and the server log (gitignored).
ARTIFACTS = REPO / "test-artifacts" / "browser"
#: A laptop-sized window: plots and per-rank output must be legible at this size.
VIEWPORT = {"width": 1280, "height": 800}
