"""Build the website: every chapter of a nightly run and every released lab, as static HTML pages.

    site = build_site(Path("build/site"))                     # the newest complete run under build/nightly/
    site = build_site(out, run_folder=Path("build/nightly/2026-11-24_224303"), repo_url="https://github.com/o/n")

The folder receives ``index.html``, one page per chapter (``03_roofline.html``) and per lab
(``lab01_tensor_parallel.html``), ``_static/`` (the site's CSS and MathJax 3, copied from
the npm package ``make site`` installs under ``build/mathjax/``) and ``site.json`` (which
run, which pages). Before it returns, every file of the site and the visible text of every
page are checked with :func:`grading.student_copy.find_leaks`: a solution, hidden test or
grader line fails the build (:class:`grading.student_copy.LeakError`).
"""
from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from grading.site.internal_links import rewrite_links
from grading.site.links import DEFAULT_BRANCH, find_repository
from grading.site.pages import Page, footer_html, header_html, index_body, nav_html, notebook_title
from grading.site.render import STATIC, exporter, read_notebook, render_page
from grading.site.runs import RunFiles, SiteInputError, load_run, machine_label, newest_complete_run
from grading.student_copy import COURSE_ROOT, LeakError, find_leaks, replace_marked_folder

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Where ``make site`` installs the npm package mathjax@3 (its ``es5/`` folder is what pages load).
MATHJAX_PACKAGE = Path("build") / "mathjax" / "node_modules" / "mathjax"
#: What of MathJax's ``es5/`` the site needs: the TeX-to-SVG bundle (SVG: no web fonts to load
#: from file://) and the TeX extensions it may load on demand.
MATHJAX_FILES = ("tex-svg.js", "input/tex/extensions")
MARKER = ".course-site"
MANIFEST = "site.json"


@dataclass(frozen=True)
class Site:
    """A built site: its folder, the run it shows and its pages."""

    folder: Path
    run: RunFiles
    pages: list[Page]

    @property
    def index(self) -> Path:
        return self.folder / "index.html"


def chapter_names(course_root: Path) -> list[str]:
    """The chapters' paths relative to the course root (``notebooks/*.ipynb``), in order."""
    return [f"notebooks/{path.name}" for path in sorted((course_root / "notebooks").glob("*.ipynb"))]


def find_mathjax(mathjax_dir: Path | None, course_root: Path) -> Path:
    """MathJax 3's ``es5/`` folder: ``mathjax_dir``, else the one ``make site`` installs; SiteInputError if absent."""
    folder = Path(mathjax_dir) if mathjax_dir else course_root / MATHJAX_PACKAGE / "es5"
    if not (folder / "tex-svg.js").is_file():
        raise SiteInputError(f"MathJax 3 not found in {folder} (no tex-svg.js): `make site` installs it with "
                             "`npm install --prefix build/mathjax mathjax@3`, or pass --mathjax ES5_FOLDER")
    return folder


def collect_pages(run: RunFiles, course_root: Path, chapters: list[str]) -> list[Page]:
    """A page per chapter (its executed copy in ``run``) and per released lab notebook (``labs/*/*.ipynb``)."""
    missing = run.missing(chapters)
    if missing:
        raise SiteInputError(f"the run {run.folder} has no passed, executed copy of: {', '.join(missing)}")
    pages = []
    for name in chapters:
        executed = run.executed(name)
        pages.append(Page(name, f"{Path(name).stem}.html", _title(executed, Path(name).stem), "chapters", executed))
    for path in sorted((course_root / "labs").glob("lab*/*.ipynb")):
        source = path.relative_to(course_root).as_posix()
        pages.append(Page(source, f"{path.parent.name}.html", _title(path, path.parent.name), "labs", path))
    return pages


def _title(path: Path, fallback: str) -> str:
    return notebook_title(read_notebook(path).cells, fallback)


def prepare_folder(out_dir: Path) -> Path:
    """``out_dir`` emptied for a new build; refuses a non-empty folder that is not a site built here."""
    out_dir = Path(out_dir).resolve()
    replace_marked_folder(out_dir, MARKER, "a course website", "course site", SiteInputError)
    return out_dir


def copy_static(out_dir: Path, mathjax_es5: Path) -> None:
    """The site's CSS and the MathJax files pages load, into ``out_dir/_static``."""
    static = out_dir / STATIC
    shutil.copytree(STATIC_DIR, static)
    for relative in MATHJAX_FILES:
        source, target = mathjax_es5 / relative, static / "mathjax" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        elif source.is_file():
            shutil.copy2(source, target)


def build_site(out_dir: Path, run_folder: Path | None = None, *, course_root: Path = COURSE_ROOT,
               nightly_dir: Path | None = None, mathjax_dir: Path | None = None, repo_url: str | None = None,
               branch: str = DEFAULT_BRANCH) -> Site:
    """Write the website for ``run_folder`` (default: the newest complete run under ``nightly_dir``,
    itself ``course_root/build/nightly``) into ``out_dir``; check it for leaks; return it."""
    course_root = Path(course_root).resolve()
    chapters = chapter_names(course_root)
    if not chapters:
        raise SiteInputError(f"no chapters in {course_root / 'notebooks'}")
    run = load_run(run_folder) if run_folder else newest_complete_run(
        nightly_dir or course_root / "build" / "nightly", chapters)
    pages = collect_pages(run, course_root, chapters)
    mathjax_es5 = find_mathjax(mathjax_dir, course_root)
    try:
        repository = find_repository(repo_url, branch, course_root)
    except ValueError as exc:
        raise SiteInputError(str(exc)) from None
    out_dir = prepare_folder(out_dir)
    copy_static(out_dir, mathjax_es5)
    label, html_exporter = machine_label(run), exporter()
    targets = {page.source: page.filename for page in pages}
    site_files = {page.filename for page in pages} | {"index.html"}
    for page in pages:
        header = header_html(page, label if page.section == "chapters" else None, repository)
        text = render_page(page, nav_html(pages, page), header, footer_html(run.folder.name), html_exporter)
        (out_dir / page.filename).write_text(rewrite_links(text, page.source, targets, site_files, repository))
    (out_dir / "index.html").write_text(_index_page(pages, label, run.folder.name))
    (out_dir / MANIFEST).write_text(json.dumps(
        {"run": str(run.folder), "started": run.started, "machine": label.text(),
         "pages": [{"source": page.source, "file": page.filename, "title": page.title, "section": page.section}
                   for page in pages]}, indent=2) + "\n")
    check_no_leaks(out_dir, course_root)
    return Site(out_dir, run, pages)


def _index_page(pages: list[Page], label, run_name: str) -> str:
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1.0">'
            f'<title>Multi-GPU programming</title><link rel="stylesheet" href="{STATIC}/site.css"></head>'
            f'<body class="site-page site-index"><nav class="site-nav" aria-label="Contents">{nav_html(pages, None)}</nav>'
            f'<div class="site-content"><main>{index_body(pages, label, run_name)}</main>'
            f'<footer class="site-footer">{footer_html(run_name)}</footer></div></body></html>\n')


class _VisibleText(HTMLParser):
    """The text a reader sees on a page (no style, no script), line breaks kept."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag, attrs):
        self._hidden += tag in ("style", "script")

    def handle_endtag(self, tag):
        self._hidden -= tag in ("style", "script") and self._hidden > 0

    def handle_data(self, data):
        if not self._hidden:
            self.parts.append(data)


def visible_text(page_html: str) -> str:
    parser = _VisibleText()
    parser.feed(page_html)
    return "".join(parser.parts)


def site_leaks(site_dir: Path, course_root: Path = COURSE_ROOT) -> list[str]:
    """:func:`find_leaks` over the site's files and over each page's visible text (tags removed, so a
    highlighted code line reads as its source); one line per leak."""
    leaks = find_leaks(site_dir, course_root)
    with tempfile.TemporaryDirectory(prefix="course-site-text-") as scratch:
        for page in sorted(Path(site_dir).glob("*.html")):
            (Path(scratch) / f"{page.name}.txt").write_text(visible_text(page.read_text()))
        leaks += [f"visible text of {leak}" for leak in find_leaks(Path(scratch), course_root)]
    return leaks


def check_no_leaks(site_dir: Path, course_root: Path = COURSE_ROOT) -> None:
    leaks = site_leaks(site_dir, course_root)
    if leaks:
        raise LeakError("the website shows instructors' material:\n  " + "\n  ".join(leaks))
