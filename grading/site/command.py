"""`course site`: build the website (build/site/) from a nightly run's executed notebooks.

    course site                                   # the newest complete run under build/nightly/
    course site --from build/nightly/2026-11-24_224303 --out /tmp/site
    course site --run --quick                     # execute the chapters now (course nightly), then build
    course site --repo-url https://github.com/OWNER/NAME --branch main    # Binder links

The exit status is 0 when the site was written, 1 when the run it started failed or the site
would leak instructors' material, 2 for a mistake on the command line.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from grading.site.links import DEFAULT_BRANCH, REPO_URL_VARIABLE


def add_arguments(parser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--from", dest="run_folder", default=None, metavar="RUN_FOLDER",
                        help="a nightly run folder (default: the newest complete one under build/nightly/)")
    source.add_argument("--run", action="store_true",
                        help="execute the chapters with course nightly first (no lab grading), then build from that run")
    parser.add_argument("--quick", dest="quick", action="store_true", default=None,
                        help="with --run: QUICK sizes (the default without a GPU)")
    parser.add_argument("--out", default=None, help="the site's folder (default build/site)")
    parser.add_argument("--repo-url", default=None,
                        help=f"GitHub URL the Binder links open (default ${REPO_URL_VARIABLE}, else git's origin remote)")
    parser.add_argument("--branch", default=DEFAULT_BRANCH, help=f"branch for the Binder links (default {DEFAULT_BRANCH})")
    parser.add_argument("--mathjax", default=None,
                        help="MathJax 3's es5/ folder (default build/mathjax/node_modules/mathjax/es5, from make site)")
    parser.add_argument("--root", default=".", help="course folder holding notebooks/ and labs/ (default .)")


def main(args) -> int:
    """``course site``: 0 when the site was written."""
    from grading.cli import UsageError
    from grading.nightly.notebooks import NightlyInputError
    from grading.site.build import build_site
    from grading.site.runs import SiteInputError
    from grading.student_copy import LeakError

    if args.quick and not args.run:
        raise UsageError("--quick goes with --run (it sets the sizes of the run it starts)")
    root = Path(args.root).resolve()
    run_folder = Path(args.run_folder) if args.run_folder else None
    try:
        if args.run:
            from grading.nightly.runner import run_nightly

            run, run_folder = run_nightly([str(root / "notebooks")], root=root, quick=args.quick, grading=False)
            if run.failures or run.interrupted:
                sys.stderr.write(f"course site: the nightly run {run_folder} did not pass; no site built\n")
                return 1
        started = time.monotonic()
        site = build_site(Path(args.out) if args.out else root / "build" / "site", run_folder, course_root=root,
                          mathjax_dir=args.mathjax, repo_url=args.repo_url, branch=args.branch)
    except (SiteInputError, NightlyInputError) as exc:
        raise UsageError(str(exc)) from None
    except LeakError as exc:
        sys.stderr.write(f"course site: {exc}\n")
        return 1
    print(f"site: {site.index} ({len(site.pages)} pages from {site.run.folder.name}, "
          f"built in {time.monotonic() - started:.1f} s)")
    return 0
