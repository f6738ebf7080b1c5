"""The website builder (grading.site) on a tiny course: two executed chapters, one lab, one solution."""
from __future__ import annotations

import base64
import functools
import json
import re
import shutil

import nbformat
import pytest

from grading.cli import main as course_main
from grading.nightly.publish import publish_site
from grading.nightly.report import FAILED, PASSED, NightlyRun, Result, write_reports
from grading.site import SiteInputError, build_site, site_leaks
from grading.site.links import Repository, binder_url
from grading.site.runs import RunFiles, machine_label, newest_complete_run
from grading.student_copy import LeakError

# A 1x1 PNG (a figure's stand-in: the builder only carries it over).
PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a5a0e5e70000000049454e44ae426082")).decode()
SOLUTION_LINES = ["partial_sums = [tensor.clone() for tensor in shards_of_this_rank]",
                  "left_neighbour_rank = (rank - 1 + world_size) % world_size",
                  "right_neighbour_rank = (rank + 1) % world_size  # ring order"]


@functools.cache
def environment() -> dict:
    """This machine's environment block (what the nightly writes), with a CPU, torch and backend of our choosing."""
    from labutils.command.doctor import environment as probe

    found = probe()
    found["cpu"].update(model="Test CPU 9000", usable_cpus=2)
    found["torch"]["torch"] = "2.13.0+cpu"
    found["gpus"].update(count=0, devices=[])
    found["backend"]["2"] = {"backend": "gloo", "device_type": "cpu", "reason": "no GPU"}
    return found


REPO_URL = "https://github.com/example/multigpu-course"


def _chapter(title: str, widget: bool = False):
    """An executed chapter: a parameters cell papermill injected, math in Markdown, a figure, maybe a widget."""
    cells = [nbformat.v4.new_markdown_cell(f"# {title}\n\nThe algbw is $S/T$ and $$T = \\alpha + S\\beta$$\n\n"
                                           "Next: [the ring](01_ring.ipynb), [its lab](../labs/lab01_ring/ring.ipynb#Lab-1:-a-ring), "
                                           "[the README](../README.md)."),
             nbformat.v4.new_code_cell("QUICK = True", metadata={"tags": ["injected-parameters"]}),
             nbformat.v4.new_code_cell("plot()", outputs=[nbformat.v4.new_output(
                 "display_data", data={"image/png": PNG, "text/plain": "<Figure>"})])]
    notebook = nbformat.v4.new_notebook(cells=cells)
    if widget:
        cells.append(nbformat.v4.new_code_cell("explorer", outputs=[nbformat.v4.new_output(
            "display_data", data={"application/vnd.jupyter.widget-view+json": {"model_id": "box", "version_major": 2},
                                  "text/plain": "Explorer(...)"})]))
        notebook.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"version_major": 2, "state": {
            "box": {"model_name": "VBoxModel", "state": {"children": ["IPY_MODEL_slider", "IPY_MODEL_size",
                                                                             "IPY_MODEL_image"]}},
            "slider": {"model_name": "IntSliderModel", "state": {"description": "ranks n", "value": 8}},
            "size": {"model_name": "FloatLogSliderModel",
                     "state": {"description": "bytes S", "value": 16777216.0, "readout_format": ".3g"}},
            "image": {"model_name": "ImageModel", "state": {"format": "png"},
                      "buffers": [{"path": ["value"], "encoding": "base64", "data": PNG}]}}}}
    return notebook


@pytest.fixture
def course(tmp_path):
    """A course folder (notebooks/, labs/, solutions/), a complete nightly run of it and a MathJax stand-in."""
    root = tmp_path / "course"
    for name, title in (("00_start", "Start here"), ("01_ring", "1. The ring")):
        (root / "notebooks").mkdir(parents=True, exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}")]),
                       root / "notebooks" / f"{name}.ipynb")
    solution = "### BEGIN SOLUTION\n" + "\n".join(SOLUTION_LINES) + "\n### END SOLUTION"
    for folder, source in (("solutions", solution), ("labs", "# YOUR CODE HERE\nraise NotImplementedError()")):
        (root / folder / "lab01_ring").mkdir(parents=True)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Lab 1: a ring"),
                                                       nbformat.v4.new_code_cell(source)]),
                       root / folder / "lab01_ring" / "ring.ipynb")
    run = _run(root / "build" / "nightly" / "2026-01-02_000000", "2026-01-02T00:00:00")
    mathjax = tmp_path / "mathjax-es5"
    (mathjax / "input" / "tex" / "extensions").mkdir(parents=True)
    (mathjax / "tex-svg.js").write_text("window.MathJax = window.MathJax || {};\n")
    return {"root": root, "run": run, "mathjax": mathjax, "site": tmp_path / "site"}


def _run(folder, started, statuses=(PASSED, PASSED), interrupted=False):
    """A nightly run folder holding the two chapters' executed copies and its results.json."""
    rows = []
    for (name, title, widget), status in zip((("00_start", "Start here", False), ("01_ring", "1. The ring", True)),
                                             statuses):
        path = folder / "notebooks" / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(_chapter(title, widget), path)
        rows.append(Result(f"notebooks/{name}.ipynb", "chapters", status, 1.0, executed=f"notebooks/{name}.ipynb"))
    run = NightlyRun(started, 2.0, {"QUICK": True, "WORLD_SIZE": 2, "BACKEND": "auto"}, environment(), rows,
                     interrupted=interrupted)
    write_reports(run, folder)
    return run


def _build(course, **options):
    return build_site(course["site"], course_root=course["root"], mathjax_dir=course["mathjax"],
                      repo_url=REPO_URL, **options)


def test_pages_hold_text_math_figures_label_and_run_links(course):
    site = _build(course)
    assert [page.filename for page in site.pages] == ["00_start.html", "01_ring.html", "lab01_ring.html"]
    page = (site.folder / "01_ring.html").read_text()
    assert "<h1" in page and "1. The ring" in page
    assert "$S/T$" in page and "\\alpha" in page  # left for MathJax, which the page loads from the site
    assert '<script id="MathJax-script" src="_static/mathjax/tex-svg.js">' in page
    assert (site.folder / "_static" / "mathjax" / "tex-svg.js").is_file()
    assert f"data:image/png;base64,{PNG}" in page
    assert "Test CPU 9000 (2 usable CPUs) · GPU: none · backend gloo · torch 2.13.0+cpu" in page
    assert "Executed 2026-01-02" in page and "QUICK sizes" in page
    assert "make lab   # then open notebooks/01_ring.ipynb" in page
    assert binder_url(Repository.parse(REPO_URL), "notebooks/01_ring.ipynb") in page.replace("&amp;", "&")
    assert "injected-parameters" not in page and "QUICK = True" not in page
    assert re.search(r'<(script|link)[^>]+(src|href)="(https?:)?//', page) is None, "a page loads from the network"
    assert 'href="00_start.html"' in page and re.search(r'<a [^>]*aria-current="page"[^>]*>1\. The ring', page)
    index = (site.folder / "index.html").read_text()
    assert all(f'href="{name}"' in index for name in ("00_start.html", "01_ring.html", "lab01_ring.html"))


def _anchors(page) -> set[str]:
    return set(re.findall(r'\sid="([^"]+)"', page.read_text()))


def test_every_link_of_the_site_resolves(course):
    site = _build(course)
    pages = sorted(site.folder.glob("*.html"))
    walked = 0
    for page in pages:
        for target in re.findall(r'<(?:a|link|script|img)\b[^>]*?\s(?:href|src)="([^"]*)"', page.read_text()):
            if re.match(r"^(https?:|data:|mailto:)", target):
                continue
            path, _, anchor = target.partition("#")
            linked = site.folder / path if path else page
            assert linked.is_file(), f"{page.name} links {target}, which the site does not have"
            assert not anchor or linked.suffix != ".html" or anchor in _anchors(linked), f"{page.name}: {target}"
            walked += 1
    assert walked > 3 * len(pages)
    start = (site.folder / "00_start.html").read_text()
    assert 'href="01_ring.html"' in start and 'href="lab01_ring.html#Lab-1:-a-ring"' in start
    assert f'href="{REPO_URL}/blob/main/README.md"' in start and not re.search(r'href="[^":]*\.ipynb', start)


def test_widget_becomes_its_static_draw_with_a_note(course):
    page = (_build(course).folder / "01_ring.html").read_text()
    assert "application/vnd.jupyter.widget" not in page  # neither the view nor the state is left
    static = page[page.index('class="static-widget"'):]
    assert "ranks n 8" in static and "bytes S 1.68e+07" in static and f'src="data:image/png;base64,{PNG}"' in static
    assert "Run the notebook" in static


def test_lab_page_is_the_released_version_without_solution(course):
    site = _build(course)
    page = (site.folder / "lab01_ring.html").read_text()
    assert "NotImplementedError" in page and "Student version" in page
    assert not any(line.split(" ")[0] in page for line in SOLUTION_LINES)
    assert site_leaks(site.folder, course["root"]) == []


def test_a_solution_shown_on_a_page_fails_the_build(course):
    leaked = course["root"] / "labs" / "lab01_ring" / "ring.ipynb"
    notebook = nbformat.read(leaked, as_version=4)
    notebook.cells.append(nbformat.v4.new_markdown_cell("    " + "\n    ".join(SOLUTION_LINES)))  # pasted as text
    nbformat.write(notebook, leaked)
    with pytest.raises(LeakError, match="lab01_ring.html.* 3 lines of solutions/lab01_ring/ring.ipynb"):
        _build(course)


def test_newest_complete_run_skips_failed_interrupted_and_newer_partial_runs(course):
    nightly = course["root"] / "build" / "nightly"
    _run(nightly / "2026-01-03_000000", "2026-01-03T00:00:00", statuses=(PASSED, FAILED))
    _run(nightly / "2026-01-04_000000", "2026-01-04T00:00:00", interrupted=True)
    _run(nightly / "2026-01-01_000000", "2026-01-01T00:00:00")
    (nightly / "not-a-run").mkdir()
    chapters = ["notebooks/00_start.ipynb", "notebooks/01_ring.ipynb"]
    assert newest_complete_run(nightly, chapters).folder.name == "2026-01-02_000000"
    with pytest.raises(SiteInputError, match="no complete nightly run"):
        newest_complete_run(nightly, chapters + ["notebooks/02_missing.ipynb"])


def test_machine_label_names_gpus_and_the_backend_chosen():
    gpus_here = {**environment(), "gpus": {"devices": [{"name": "NVIDIA H100"}] * 4},
                 "backend": {"4": {"backend": "nccl"}}}
    label = machine_label(RunFiles(None, {"started": "2026-02-03T02:30:00", "environment": gpus_here,
                                          "settings": {"QUICK": False, "WORLD_SIZE": 4, "BACKEND": "auto"}}))
    assert label.text() == ("Executed 2026-02-03 on Test CPU 9000 (2 usable CPUs) · GPU: 4× NVIDIA H100 · "
                            "backend nccl · torch 2.13.0+cpu · 4 ranks, full sizes")


def test_bad_input_gets_a_clear_error(course, tmp_path):
    with pytest.raises(SiteInputError, match="make site"):
        build_site(course["site"], course_root=course["root"], mathjax_dir=tmp_path / "nowhere")
    with pytest.raises(SiteInputError, match="not a nightly run folder"):
        _build(course, run_folder=tmp_path)
    with pytest.raises(SiteInputError, match="not a GitHub repository URL"):
        build_site(course["site"], course_root=course["root"], mathjax_dir=course["mathjax"], repo_url="ftp://x")
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "notes.txt").write_text("mine")
    with pytest.raises(SiteInputError, match="not a course website"):
        _build({**course, "site": tmp_path / "precious"})
    assert (tmp_path / "precious" / "notes.txt").read_text() == "mine"


def test_binder_link_and_repository_urls():
    repository = Repository.parse("git@github.com:example/course.git", branch="spring-2027")
    assert repository.url == "https://github.com/example/course"
    assert binder_url(repository, "notebooks/03_roofline.ipynb") == \
        "https://mybinder.org/v2/gh/example/course/spring-2027?labpath=notebooks%2F03_roofline.ipynb"
    with pytest.raises(ValueError, match="branch"):
        Repository.parse(REPO_URL, branch="two words")


def test_nightly_publishes_only_a_green_run_and_its_report_links_the_site(course):
    root, site_dir = course["root"], course["root"] / "build" / "site"
    failed_folder = root / "build" / "nightly" / "2026-01-05_000000"
    failed = _run(failed_folder, "2026-01-05T00:00:00", statuses=(PASSED, FAILED))
    line = publish_site(failed, failed_folder, root, mathjax_dir=course["mathjax"], repo_url=REPO_URL)
    assert "not updated" in line and not site_dir.exists()
    green_folder = root / "build" / "nightly" / "2026-01-02_000000"
    line = publish_site(course["run"], green_folder, root, mathjax_dir=course["mathjax"], repo_url=REPO_URL)
    assert "built from this run" in line and (site_dir / "01_ring.html").is_file()
    assert "Website: [../../site/index.html](../../site/index.html) (built from this run)" in \
        (green_folder / "report.md").read_text()
    assert 'href="../../site/index.html"' in (green_folder / "report.html").read_text()
    publish_site(failed, failed_folder, root, mathjax_dir=course["mathjax"])
    assert "the site shows the last green run" in (failed_folder / "report.md").read_text()
    assert json.loads((site_dir / "site.json").read_text())["run"] == str(green_folder.resolve())


def test_course_site_command(course, capsys):
    status = course_main(["site", "--root", str(course["root"]), "--out", str(course["site"]),
                          "--mathjax", str(course["mathjax"]), "--repo-url", REPO_URL])
    assert status == 0 and "3 pages from 2026-01-02_000000" in capsys.readouterr().out
    status = course_main(["site", "--root", str(course["root"]), "--from", str(course["root"] / "nope")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "not a nightly run folder" in err


def _executable_course(root, failing: bool):
    """A course of one chapter papermill can run (a parameters cell), which raises when ``failing``."""
    cells = [nbformat.v4.new_markdown_cell("# 0. Start\n\nOne rank per GPU: $n = 2$."),
             nbformat.v4.new_code_cell('QUICK = False\nWORLD_SIZE = 2\nBACKEND = "auto"', metadata={"tags": ["parameters"]}),
             nbformat.v4.new_code_cell("raise ValueError('broken chapter')" if failing else "print('QUICK is', QUICK)")]
    (root / "notebooks").mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}}), root / "notebooks" / "00_start.ipynb")


def test_course_site_run_executes_the_chapters_then_builds_only_when_they_pass(course, tmp_path, capsys):
    root = tmp_path / "runnable"
    arguments = ["site", "--run", "--quick", "--root", str(root), "--out", str(root / "build" / "site"),
                 "--mathjax", str(course["mathjax"]), "--repo-url", REPO_URL]
    _executable_course(root, failing=True)
    assert course_main(arguments) == 1
    assert "did not pass; no site built" in capsys.readouterr().err and not (root / "build" / "site").exists()
    _executable_course(root, failing=False)
    assert course_main(arguments) == 0
    page = (root / "build" / "site" / "00_start.html").read_text()
    assert "QUICK is True" in page and "QUICK sizes" in page  # --quick reached the nightly run


def test_course_nightly_site_publishes_and_links_the_site(course, tmp_path, capsys):
    root = tmp_path / "runnable"
    _executable_course(root, failing=False)
    shutil.copytree(course["mathjax"], root / "build" / "mathjax" / "node_modules" / "mathjax" / "es5")
    out = root / "build" / "nightly" / "tonight"
    assert course_main(["nightly", "--site", "--quick", "--no-grading", "--root", str(root), "--out", str(out)]) == 0
    assert "website:" in capsys.readouterr().err and (root / "build" / "site" / "00_start.html").is_file()
    assert "Website: [../../site/index.html](../../site/index.html) (built from this run)" in \
        (out / "report.md").read_text()
    assert course_main(["site", "--quick", "--root", str(root)]) == 2
    assert "--quick goes with --run" in capsys.readouterr().err
