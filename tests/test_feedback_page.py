"""The feedback page students fetch: formulas typeset offline, the table of contents names the parts."""
from __future__ import annotations

import re

import nbformat
import pytest
from traitlets.config import Config

from grading.autograder.feedback import FeedbackPage, configure_feedback_page


def _graded_notebook():
    meta = {"grade": True, "solution": False, "locked": True, "points": 3, "score": 3.0}
    cells = [nbformat.v4.new_markdown_cell("The ring sends $n - 1$ messages."),
             nbformat.v4.new_code_cell("# Part 1: the ring's neighbours\njudge('ring_basics')",
                                       metadata={"nbgrader": {**meta, "grade_id": "ring_basics",
                                                              "comment": "Well done."}})]
    return nbformat.v4.new_notebook(cells=cells)


def _feedback_page(tmp_path, monkeypatch, mathjax: str | None) -> str:
    if mathjax is not None:
        bundle = tmp_path / "tex-svg.js"
        bundle.write_text(mathjax)
        monkeypatch.setenv("COURSE_MATHJAX", str(bundle))
    else:
        monkeypatch.setenv("COURSE_MATHJAX", str(tmp_path / "missing.js"))
    from nbgrader.converters import GenerateFeedback

    c = Config()
    configure_feedback_page(c)
    c.merge(GenerateFeedback(config=c).config)  # what nbgrader adds: bootstrap's CSS folder
    c.HTMLExporter.template_name = "feedback"  # what nbgrader's API (course grade) always asks for
    resources = {"nbgrader": {"notebook": "lab02_collectives", "score": 3.0, "max_score": 16.0, "late_penalty": 0}}
    body, _ = FeedbackPage(config=c).from_notebook_node(_graded_notebook(), resources=resources)
    return body


def test_the_page_carries_mathjax_and_loads_nothing_from_the_network(tmp_path, monkeypatch):
    page = _feedback_page(tmp_path, monkeypatch, "window.MATHJAX_STAND_IN = 1; // </script> inside")
    assert "window.MATHJAX_STAND_IN = 1" in page and "inlineMath" in page
    assert "<\\/script> inside" in page, "the bundle cannot close its own script tag"
    assert "cdnjs" not in page and "mathjax/2.7" not in page
    assert "$n - 1$" in page


def test_without_the_bundle_the_page_says_how_to_get_it(tmp_path, monkeypatch):
    page = _feedback_page(tmp_path, monkeypatch, None)
    assert "no MathJax at" in page and "make site" in page and "cdnjs" not in page


def test_the_table_of_contents_names_each_part(tmp_path, monkeypatch):
    page = _feedback_page(tmp_path, monkeypatch, "")
    toc = page[page.index('id="toc"'):]
    toc = toc[:toc.index("</ol>")]
    assert re.search(r'href="#ring_basics">Part 1: the ring(&#x27;|\')s neighbours</a>', toc), toc
    assert re.search(r'href="#comment-ring_basics">Comment on Part 1: the ring', toc), toc
    assert ">Test cell<" not in toc and ">Comment<" not in toc


@pytest.mark.parametrize("source, title", [("# Part 2: buckets\ncode", "Part 2: buckets"), ("code()", "ring_basics")])
def test_a_part_is_named_by_its_title_comment_else_its_id(source, title):
    from grading.autograder.feedback import part_title

    assert part_title({"source": source, "metadata": {"nbgrader": {"grade_id": "ring_basics"}}}) == title
