"""The landing page (notebooks/00_start_here.ipynb) links every chapter and lab in order, runs
in a moment, and its links open the chapters in JupyterLab; `make lab` lands on it; every
course notebook opens without JupyterLab asking which kernel to use."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course_paths import LABS, NOTEBOOKS, REPO
from jupyterlab_ui import NotebookUI
from lab_server import LabServer

LANDING = NOTEBOOKS / "00_start_here.ipynb"
LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
#: Seconds Run All may take on the landing page once its kernel is up (it counts GPUs and starts two
#: ranks): generous, for a busy machine; the time taken is printed.
RUN_ALL_LIMIT_S = 30


def _chapters() -> list[Path]:
    return sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if p != LANDING)


def _lab_notebooks() -> list[Path]:
    return sorted(LABS.glob("*/*.ipynb"))


def _links(notebook) -> list[tuple[str, str]]:
    """(text, target) of every Markdown link, in reading order."""
    return [m.groups() for cell in notebook.cells if cell.cell_type == "markdown"
            for m in LINK.finditer(cell.source)]


def _title(path: Path) -> str:
    """A notebook's title: its first Markdown heading without the #."""
    first = nbformat.read(path, 4).cells[0]
    return first.source.splitlines()[0].lstrip("#").strip()


def test_landing_page_links_every_chapter_in_order_with_its_title():
    links = _links(nbformat.read(LANDING, 4))
    chapter_links = [(text, target) for text, target in links if re.fullmatch(r"\d\d_\w+\.ipynb", target)]
    assert [target for _, target in chapter_links] == [p.name for p in _chapters()], \
        "the landing page must link every chapter in notebooks/, in order"
    for text, target in chapter_links:
        assert text == _title(NOTEBOOKS / target), f"link text {text!r} is not the title of {target}"


def test_landing_page_links_every_lab_with_its_title_and_no_missing_file():
    links = [(text, target) for text, target in _links(nbformat.read(LANDING, 4)) if "://" not in target]
    for _, target in links:
        assert (NOTEBOOKS / target).exists(), f"the landing page links {target}, which does not exist"
    titles = {(NOTEBOOKS / target).resolve(): text for text, target in links}
    for lab in _lab_notebooks():
        name = str(lab.relative_to(REPO))
        assert lab.resolve() in titles, f"{name} is not linked from the landing page"
        assert titles[lab.resolve()] == _title(lab), f"link text {titles[lab.resolve()]!r} is not the title of {name}"


def test_landing_page_has_the_parameters_every_notebook_has():
    tagged = [c for c in nbformat.read(LANDING, 4).cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "exactly one cell tagged 'parameters' (the nightly runner injects into it)"
    for name in ("QUICK", "WORLD_SIZE", "BACKEND"):
        assert re.search(rf"^{name} = ", tagged[0].source, re.MULTILINE), f"{name} missing"


def test_every_course_notebook_names_its_kernel():
    """Without kernelspec metadata JupyterLab opens a 'Select Kernel' dialog on every notebook."""
    unnamed = [str(p.relative_to(REPO)) for p in [*NOTEBOOKS.glob("*.ipynb"), *_lab_notebooks()]
               if nbformat.read(p, 4).metadata.get("kernelspec", {}).get("name") != "python3"]
    assert not unnamed, f"notebooks without the python3 kernelspec: {unnamed}"


def test_landing_page_runs_and_opens_the_first_chapter(page, lab_server, workspace, artifacts_dir):
    lab = NotebookUI.open(page, lab_server, "notebooks/00_start_here.ipynb", workspace)
    started = time.monotonic()
    lab.run_all()
    lab.wait_until_run_finished(timeout_s=60)
    elapsed = time.monotonic() - started
    print(f"landing page: Run All took {elapsed:.1f} s")
    assert lab.cells_with_errors() == []
    assert re.search(r"GPUs visible: \d+\n\d+ ranks: ", lab.panel.inner_text())
    assert elapsed < RUN_ALL_LIMIT_S, f"the landing page took {elapsed:.1f} s to run"
    lab.panel.locator("h2", has_text="Check your machine").evaluate("h => h.scrollIntoView({block: 'start'})")
    lab.screenshot(artifacts_dir / "landing_page.png")

    first = _chapters()[0]
    lab.panel.get_by_role("link", name=_title(first), exact=True).click()
    tab = page.locator(".lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel")
    tab.filter(has_text=first.name).wait_for(timeout=30_000)
    chapter = NotebookUI(page, lab_server, f"notebooks/{first.name}")
    chapter.panel.locator("h1").first.wait_for()
    assert chapter.panel.locator("h1").first.inner_text().startswith(_title(first)[:20])
    chapter.screenshot(artifacts_dir / "landing_page_first_chapter.png")


def _make_lab_command() -> list[str]:
    """The JupyterLab command `make lab` runs once .venv is installed, as `make -n` prints it, started
    by the interpreter running the tests (whose venv may live elsewhere than the Makefile's)."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    printed = subprocess.run(["make", "-n", "-s", "lab"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    lines = [line for line in printed.splitlines() if re.search(r"jupyter(-lab| lab)\b", line)]
    assert len(lines) == 1, f"`make -n lab` should print one jupyter lab command:\n{printed}"
    words = shlex.split(lines[0])
    settings = []  # `env NAME=VALUE ...` before the program: the environment make lab sets
    if words[0] == "env":
        words.pop(0)
        while "=" in words[0]:
            settings.append(os.path.expandvars(words.pop(0)))  # as the shell make runs would
    program, *arguments = words
    assert Path(program).name == "jupyter", lines[0]
    assert "--ip=127.0.0.1" in arguments and "--port=8888" in arguments, "make lab listens on 127.0.0.1:8888 by default"
    arguments = [a for a in arguments if not a.startswith(("--ip=", "--port="))]  # the test server picks its own
    launcher = ["env", *settings] if settings else []
    return [*launcher, sys.executable, "-m", "jupyter", *arguments]  # the venv's jupyter: the one running these tests


@pytest.mark.browser
@pytest.mark.slow
def test_make_lab_lands_on_the_landing_page(browser, course_root, tmp_path, artifacts_dir):
    """The address `make lab` prints (what a student on a remote GPU node opens through an SSH
    tunnel, with no browser started for them) opens the landing page, not an empty JupyterLab."""
    server = LabServer.start(course_root, tmp_path / "jupyter-state", artifacts_dir / "jupyter-server-make-lab.log",
                             command=_make_lab_command())
    page = browser.new_page()
    try:
        page.goto(server.printed_url())
        printed = re.search(rf"http://127\.0\.0\.1:{server.port}/(\S*)\?token=", server.log_tail(100_000)).group(1)
        quoted = re.findall(r"`http://127\.0\.0\.1:\d+/(\S*)\?token=\.\.\.`", (REPO / "README.md").read_text())
        assert printed in quoted, f"the README quotes {quoted}, `make lab` prints .../{printed}?token=..."
        page.locator(".jp-NotebookPanel, .jp-Launcher").first.wait_for(timeout=60_000)
        page.screenshot(path=str(artifacts_dir / "make_lab.png"))
        current = page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel").inner_text()
        assert current == LANDING.name, (
            f"`make lab` printed {server.printed_url()!r}, which opens {current!r}, not {LANDING.name}: "
            "add --LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb to the Makefile's lab target")
    finally:
        page.close()
        server.stop()
