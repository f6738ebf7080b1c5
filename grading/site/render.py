"""One notebook to one HTML page with nbconvert's HTML exporter and the site's template.

    html_text = render_page(page, nav, header, footer)

The template (``template/course/``) extends nbconvert's ``lab`` template, so cells look as
they do in JupyterLab, and removes everything that would need the network: require.js,
the widget manager and mermaid are left out, MathJax 3 comes from the site's own
``_static/mathjax/``. Before export, papermill's injected-parameters cell is dropped (the
page header says which sizes ran) and widget outputs become their static draw
(:mod:`grading.site.widgets_static`). Images stay inline (base64 ``data:`` URLs), so a page is one file.
"""
from __future__ import annotations

from pathlib import Path

import nbformat

from grading.site.pages import Page
from grading.site.widgets_static import replace_widget_views

TEMPLATE_DIR = Path(__file__).resolve().parent / "template"
TEMPLATE_NAME = "course"
INJECTED_TAG = "injected-parameters"
#: Where the site's CSS and MathJax live, relative to a page.
STATIC = "_static"


def read_notebook(path: Path):
    """The notebook at ``path`` (nbformat 4); ValueError naming the file when it is not one."""
    try:
        return nbformat.read(str(path), as_version=4)
    except (OSError, ValueError) as exc:  # nbformat's read errors are ValueError subclasses
        raise ValueError(f"cannot read the notebook {path}: {exc}") from None


def prepare(notebook) -> int:
    """Drop papermill's injected-parameters cell and draw widgets statically, in place; widgets replaced."""
    notebook.cells = [cell for cell in notebook.cells if INJECTED_TAG not in cell.get("metadata", {}).get("tags", [])]
    return replace_widget_views(notebook)


def exporter():
    """nbconvert's HTMLExporter with the site's template (input prompts kept: readers see In [n])."""
    from nbconvert import HTMLExporter

    return HTMLExporter(template_name=TEMPLATE_NAME, extra_template_basedirs=[str(TEMPLATE_DIR)])


def render_page(page: Page, nav: str, header: str, footer: str, html_exporter=None) -> str:
    """The HTML of ``page``: its notebook rendered inside the site's navigation, header and footer."""
    notebook = read_notebook(page.notebook)
    prepare(notebook)
    notebook.metadata["title"] = page.title
    resources = {"site": {"static": STATIC, "nav_html": nav, "header_html": header, "footer_html": footer}}
    body, _resources = (html_exporter or exporter()).from_notebook_node(notebook, resources=resources)
    return body
