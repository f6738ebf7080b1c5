"""The course website in headless Chromium: every chapter shows its figures and typeset formulas, no page
shows a solution or a hidden test.

The site is built the way the nightly publishes it: the session's QUICK nightly run of the chapters
(no lab grading) into a temporary folder, then ``grading.site.build_site`` from that run. Pages
are opened from file:// (the site needs no server). MathJax 3 comes from the npm package that
``make site`` installs under build/mathjax/ (installed here the same way when missing).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from course_paths import REPO
from grading.site import build_site
from grading.site.build import MATHJAX_PACKAGE
from grading.site.render import prepare
from grading.student_copy import find_leaks

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: Seconds a page may take to load and typeset its formulas.
PAGE_TIMEOUT_MS = 60_000
IMAGE_MIMES = ("image/png", "image/jpeg")
#: Inline or display math that MathJax left as TeX source.
RAW_MATH = re.compile(r"\$\$[^$]+\$\$|\$[^$\s][^$\n]*\$")


def _mathjax_es5() -> Path:
    es5 = REPO / MATHJAX_PACKAGE / "es5"
    if not (es5 / "tex-svg.js").is_file():  # what `make site` does
        subprocess.run(["npm", "install", "--prefix", str(REPO / "build" / "mathjax"), "--no-audit", "--no-fund",
                        "mathjax@3"], check=True, capture_output=True, timeout=300)
    return es5


@pytest.fixture(scope="module")
def site(tmp_path_factory, quick_chapter_run):
    """A site built from the session's QUICK nightly run of the chapters."""
    run, run_dir = quick_chapter_run
    assert not run.failures, f"the nightly run failed: {[row.name for row in run.failures]} (see {run_dir})"
    return build_site(tmp_path_factory.mktemp("site") / "site", run_dir, course_root=REPO, mathjax_dir=_mathjax_es5(),
                      repo_url="https://github.com/example/multigpu-course")


@pytest.fixture(scope="module")
def site_tab(browser):
    tab = browser.new_page()
    tab.set_default_timeout(PAGE_TIMEOUT_MS)
    yield tab
    tab.close()


def _open(tab, path: Path) -> None:
    tab.goto(path.as_uri())
    tab.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise")
    tab.evaluate("() => MathJax.startup.promise")


def _figures_in(notebook_path: Path) -> int:
    """Pictures in an executed notebook's outputs: image outputs, and a widget's picture once it is drawn
    statically (a widget's stored state holds its last PNG)."""
    notebook = nbformat.read(str(notebook_path), as_version=4)
    prepare(notebook)
    count = 0
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            data = output.get("data") or {}
            count += sum(mime in data for mime in IMAGE_MIMES) + "".join(data.get("text/html", "")).count("<img ")
    return count


def test_every_chapter_shows_its_figures_and_typeset_formulas(site, site_tab, artifacts_dir):
    chapters = [page for page in site.pages if page.section == "chapters"]
    assert len(chapters) == len(list((REPO / "notebooks").glob("*.ipynb")))
    for page in chapters:
        _open(site_tab, site.folder / page.filename)
        images = site_tab.evaluate("""() => [...document.querySelectorAll('main img')].map(img => ({
            loaded: img.complete && img.naturalWidth > 0, width: img.getBoundingClientRect().width,
            height: img.getBoundingClientRect().height}))""")
        expected = _figures_in(page.notebook)
        assert len(images) >= expected, f"{page.filename}: {len(images)} figures shown, the notebook has {expected}"
        broken = [image for image in images if not image["loaded"] or image["width"] <= 0 or image["height"] <= 0]
        assert not broken, f"{page.filename}: figures not drawn: {broken}"
        if page.source != "notebooks/00_start_here.ipynb":
            assert images, f"{page.filename}: a chapter without a figure"
        formulas = site_tab.locator("main mjx-container svg").count()
        assert formulas > 0, f"{page.filename}: no formula typeset by MathJax"
        prose = "\n".join(site_tab.locator("main .jp-RenderedMarkdown").all_inner_texts())
        assert not RAW_MATH.findall(prose), f"{page.filename}: TeX left untypeset: {RAW_MATH.findall(prose)[:3]}"
        label = site_tab.locator(".machine-label").inner_text()
        assert "Measured on:" in label and "torch" in label and "GPU:" in label
        assert "make lab" in site_tab.locator(".run-local").inner_text()
        assert "mybinder.org" in site_tab.locator("a.binder-link").get_attribute("href")
    site_tab.screenshot(path=str(artifacts_dir / "site-last-chapter.png"))


def test_no_page_shows_a_solution_or_a_hidden_test(site, site_tab, tmp_path, artifacts_dir):
    for page in sorted(site.folder.glob("*.html")):
        site_tab.goto(page.as_uri())
        text = site_tab.locator("body").inner_text()
        for marker in ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
            assert marker not in text, f"{page.name} shows {marker!r}"
        (tmp_path / f"{page.name}.txt").write_text(text)
    assert find_leaks(tmp_path, REPO) == []
    lab = sorted(site.folder.glob("lab*.html"))[0]
    site_tab.goto(lab.as_uri())
    assert "Student version" in site_tab.locator(".machine-label").inner_text()
    site_tab.screenshot(path=str(artifacts_dir / f"site-{lab.stem}.png"))
