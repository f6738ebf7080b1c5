"""Debian's headless Chromium, as the browser tests (tests/browser) and the hub's (tests/hub) start it.

``chromium-headless-shell`` is Chromium's own headless build (the same Blink and V8, without the
desktop browser's window and UI code): eight loads of a JupyterLab notebook page took 49 CPU-s of
Chromium with it where ``chromium --headless`` took 56 (same machine, one run after the other).
``install_chromium.sh`` installs it with apt.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

#: The headless build from Debian's ``chromium-headless-shell`` package.
CHROMIUM = "/usr/bin/chromium-headless-shell"
#: The installer; its exit status 3 means "cannot be installed on this machine".
INSTALLER = Path(__file__).resolve().parent / "browser" / "install_chromium.sh"
CANNOT_INSTALL = 3
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def why_missing() -> str | None:
    """Install the headless shell with apt when it is missing (``install_chromium.sh``); None once it is
    there, else why this machine cannot have it (not root, no apt-get). Raises RuntimeError, with apt's
    output, when an install failed."""
    done = subprocess.run(["bash", str(INSTALLER)], capture_output=True, text=True)
    if done.returncode == CANNOT_INSTALL:
        return done.stderr.strip()
    if done.returncode:
        raise RuntimeError(f"installing Chromium failed (status {done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return None


def launch(playwright):
    """A Chromium browser from ``playwright`` (a started ``sync_playwright()``)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)


def launch_with_shared_cache(playwright, profile: Path, **context_options):
    """A Chromium browser context whose pages share one profile in ``profile`` (a fresh folder): its
    HTTP cache and V8's code cache, so a later page of the same JupyterLab reuses the scripts the
    first one compiled (eight page loads: 33 renderer CPU-s where a fresh context per page took 40).
    For pages of one server whose tests need no cookies or storage of their own."""
    return playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, args=ARGS,
                                                         **context_options)
