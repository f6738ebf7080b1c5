"""Links between the course's notebooks, made links between the website's pages.

A chapter links ``05_collectives.ipynb`` or ``../labs/lab02_collectives/lab02_collectives.ipynb``;
the site is flat and has ``05_collectives.html`` and ``lab02_collectives.html``. Each relative
``href`` of a rendered page is resolved against the notebook's folder in the course
(``notebooks/``, ``labs/LAB/``): a notebook the site has a page for becomes that page (its
``#anchor`` kept); any other file of the course becomes its address in the repository when the
site knows one, else the link is dropped and its text kept. Links to the site's own files
(``_static/``, anchors, other pages) and absolute URLs are left as they are.
"""
from __future__ import annotations

import posixpath
import re

_HREF = re.compile(r'(<a\b[^>]*?)\shref="([^"]*)"')
_ABSOLUTE = re.compile(r"^([a-z][a-z0-9+.-]*:|//|#)", re.I)


def rewrite_links(html: str, source: str, pages: dict[str, str], site_files: set[str], repository=None) -> str:
    """``html`` of the page rendered from ``source`` (a path in the course, e.g.
    ``notebooks/00_start_here.ipynb``) with its notebook links pointing at the site's pages.

    ``pages`` maps a notebook's course path to its page's file name; ``site_files`` are the files
    a link may already point at (page files, ``_static/...``)."""

    def replace(match: re.Match) -> str:
        tag, href = match.group(1), match.group(2)
        if not href or _ABSOLUTE.match(href):
            return match.group(0)
        path, _, anchor = href.partition("#")
        if path in site_files:
            return match.group(0)
        target = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        if target in pages:
            return f'{tag} href="{pages[target]}{"#" + anchor if anchor else ""}"'
        if repository is not None and not target.startswith("../"):
            return f'{tag} href="{repository.url}/blob/{repository.branch}/{target}"'
        return tag

    return _HREF.sub(replace, html)
