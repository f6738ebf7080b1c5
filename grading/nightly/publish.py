"""``course nightly --site``: publish the course website from this run when it is green.

    publish_site(run, out_dir, root)      # build/site/ rebuilt from out_dir, the reports link to it

Only a run where everything passed replaces the site, so the site always shows the last green
run; after a failure the site is left as it was and the report says so. Either way the
reports (report.md, report.html) are written again with a line linking to the site.
"""
from __future__ import annotations

import os
from pathlib import Path

from grading.nightly.report import NightlyRun, write_reports


def site_folder(root: Path) -> Path:
    return Path(root).resolve() / "build" / "site"


def publish_site(run: NightlyRun, out_dir: Path, root: Path, site_dir: Path | None = None, **site_options) -> str:
    """Build the site from ``out_dir`` when ``run`` is green, link it from the reports; the line to print.

    ``site_options`` go to :func:`grading.site.build_site` (``mathjax_dir``, ``repo_url``, ``branch``).
    A site that cannot be built (no MathJax, a leak) leaves the old one and is said in the report.
    """
    from grading.site import SiteInputError, build_site
    from grading.student_copy import LeakError

    site_dir = Path(site_dir) if site_dir else site_folder(root)
    if run.failures or run.interrupted:
        run.site_note = "not updated: this run did not pass; the site shows the last green run"
    else:
        try:
            build_site(site_dir, out_dir, course_root=Path(root), **site_options)
            run.site_note = "built from this run"
        except (SiteInputError, LeakError, ValueError) as exc:
            run.site_note = f"not updated: {exc}".splitlines()[0]
    index = site_dir / "index.html"
    run.site_link = os.path.relpath(index, out_dir) if index.is_file() else None
    write_reports(run, out_dir)
    return f"website: {index if run.site_link else 'none'} ({run.site_note})"
