"""The pages of the website and the parts around each notebook: contents, machine label, run links.

    page = Page("notebooks/03_roofline.ipynb", "03_roofline.html", "3. The roofline", "chapters", executed)
    nav_html(pages, current=page)   header_html(page, label, repository)   footer_html(run_name)

Chapter pages show an executed notebook of a nightly run and are labelled with its machine;
lab pages show the released student version from ``labs/`` (never executed: a lab is the
student's work), labelled as such.
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from grading.site.links import Repository, binder_url, local_command
from grading.site.runs import MachineLabel

#: section key -> title in the contents
SECTIONS = {"chapters": "Chapters", "labs": "Labs (student version)"}


@dataclass(frozen=True)
class Page:
    """One page: ``source`` the notebook's path relative to the course root (what a reader opens),
    ``filename`` the HTML file in the site, ``notebook`` the file rendered (executed copy or released lab)."""

    source: str
    filename: str
    title: str
    section: str
    notebook: Path


def notebook_title(cells: list, fallback: str) -> str:
    """The text of the first Markdown heading of a notebook's cells, else ``fallback``."""
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        for line in "".join(cell.get("source", "")).splitlines():
            if line.startswith("#"):
                return line.lstrip("#").strip() or fallback
    return fallback


def nav_html(pages: list[Page], current: Page | None) -> str:
    """The contents: a link per page, grouped by section, the current page marked."""
    parts = ['<p><a href="index.html"><strong>Multi-GPU programming</strong></a></p>']
    for section, title in SECTIONS.items():
        items = [page for page in pages if page.section == section]
        if not items:
            continue
        parts.append(f"<h2>{html.escape(title)}</h2><ul>")
        for page in items:
            current_mark = ' aria-current="page"' if page == current else ""
            parts.append(f'<li><a href="{html.escape(page.filename)}"{current_mark}>{html.escape(page.title)}</a></li>')
        parts.append("</ul>")
    return "".join(parts)


def header_html(page: Page, label: MachineLabel | None, repository: Repository | None) -> str:
    """Where the page's numbers came from, and how to run its notebook."""
    if label is not None:
        provenance = (f'<p class="machine-label"><strong>Measured on:</strong> {html.escape(label.text())}. '
                      "Your machine will give other numbers.</p>")
    else:
        provenance = ('<p class="machine-label"><strong>Student version:</strong> the released lab, not executed: '
                      "its cells are yours to fill in.</p>")
    local = html.escape(local_command(page.source))
    lines = [provenance, f'<p class="run-local"><strong>Run it yourself:</strong> in a checkout of the course, '
                         f"<code>{local}</code>.</p>"]
    if repository is not None:
        url = html.escape(binder_url(repository, page.source))
        lines.append(f'<p class="run-hosted"><strong>Run it without installing anything</strong> (CPU, QUICK sizes): '
                     f'<a class="binder-link" href="{url}">open {html.escape(page.source)} on Binder</a>.</p>')
    else:
        lines.append('<p class="run-hosted">No hosted link: the site was built without a repository URL '
                     "(<code>course site --repo-url https://github.com/OWNER/NAME</code>).</p>")
    return "".join(lines)


def footer_html(run_name: str | None) -> str:
    source = f"nightly run <code>{html.escape(run_name)}</code>" if run_name else "the course's notebooks"
    return f"<p>Built by <code>course site</code> from {source} with nbconvert.</p>"


def index_body(pages: list[Page], label: MachineLabel, run_name: str) -> str:
    """The site's front page: what it is, which run it shows, the contents."""
    items = "".join(f'<li><a href="{html.escape(page.filename)}">{html.escape(page.title)}</a></li>'
                    for page in pages if page.section == "chapters")
    labs = "".join(f'<li><a href="{html.escape(page.filename)}">{html.escape(page.title)}</a></li>'
                   for page in pages if page.section == "labs")
    return (f"<h1>Multi-GPU programming, hands on</h1>"
            f"<p>Every chapter as its notebook was last executed by the nightly run <code>{html.escape(run_name)}</code>: "
            f"read the text, the formulas and the plots before you run anything.</p>"
            f'<p class="machine-label"><strong>Measured on:</strong> {html.escape(label.text())}.</p>'
            f"<h2>Chapters</h2><ol start=\"0\">{items}</ol>"
            + (f"<h2>Labs</h2><ul>{labs}</ul>" if labs else ""))
