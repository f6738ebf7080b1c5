"""The course as a website: every chapter with the outputs of the last green nightly run, read before you run.

    course site                       # build/site/ from the newest complete run under build/nightly/
    course site --run                 # run the nightly on the chapters first, then build from it
    make site                         # installs MathJax 3 (npm) into build/mathjax/, then course site

Why nbconvert's HTML exporter (with the template in ``template/course/``) and not a site
generator: Jupyter Book 2 / mystmd fetches its theme from api.mystmd.org when it builds
(``myst build --html`` stops with "request to https://api.mystmd.org/templates/site/myst/book-theme
failed" on a machine without internet), Jupyter Book 1 needs Sphinx and a theme that are
not part of the course's environment, while nbconvert is already installed with JupyterLab,
works offline, renders executed notebooks exactly as JupyterLab shows them, and its ``lab``
template can be extended in one small Jinja file. The pages load nothing from the network:
MathJax 3 comes from the npm package ``mathjax`` copied into ``_static/``, figures are inline.

- ``runs``: which nightly run, the machine it ran on; ``pages``: contents, header, run links
- ``links``: Binder and local run links; ``widgets_static``: widgets as their static draw
- ``render``: one notebook to one page; ``build``: the whole site and its leak check
- ``command``: ``course site``
"""
from grading.site.build import Site, build_site, site_leaks
from grading.site.runs import SiteInputError

__all__ = ["Site", "SiteInputError", "build_site", "site_leaks"]
