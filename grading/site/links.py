"""Where a reader runs a page's notebook: locally with ``make lab``, or on Binder without installing anything.

    repository = Repository.parse("https://github.com/OWNER/NAME", branch="main")
    binder_url(repository, "notebooks/03_roofline.ipynb")
    # https://mybinder.org/v2/gh/OWNER/NAME/main?labpath=notebooks%2F03_roofline.ipynb

Binder (mybinder.org) builds the repository's ``environment.yml`` into a JupyterLab session,
so the CPU path of the course (gloo, QUICK sizes) runs there as it does on a laptop. Colab
is not offered: it ignores ``environment.yml`` and would lack the course's own package.
The repository URL comes from ``--repo-url``, else the ``COURSE_REPO_URL`` environment
variable, else the ``origin`` remote of the git checkout; without any, pages say how to
give one. No service is contacted: the links are only written.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

BINDER = "https://mybinder.org/v2/gh"
REPO_URL_VARIABLE = "COURSE_REPO_URL"
DEFAULT_BRANCH = "main"
_GITHUB = re.compile(r"^(?:https://github\.com/|git@github\.com:)([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Repository:
    """A GitHub repository and the branch whose notebooks the links open."""

    owner: str
    name: str
    branch: str = DEFAULT_BRANCH

    @classmethod
    def parse(cls, url: str, branch: str = DEFAULT_BRANCH) -> Repository:
        """From 'https://github.com/OWNER/NAME(.git)' or 'git@github.com:OWNER/NAME.git'; ValueError otherwise."""
        match = _GITHUB.match(url.strip())
        if not match:
            raise ValueError(f"not a GitHub repository URL: {url!r} (give https://github.com/OWNER/NAME)")
        if not branch or any(ch.isspace() for ch in branch):
            raise ValueError(f"not a branch name: {branch!r}")
        return cls(match.group(1), match.group(2), branch)

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.name}"


def find_repository(url: str | None, branch: str, course_root: Path) -> Repository | None:
    """The repository the links use: ``url``, else $COURSE_REPO_URL, else git's ``origin`` remote, else None."""
    url = url or os.environ.get(REPO_URL_VARIABLE) or _origin_url(course_root)
    return Repository.parse(url, branch) if url else None


def _origin_url(course_root: Path) -> str | None:
    try:
        result = subprocess.run(["git", "remote", "get-url", "origin"], cwd=course_root, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = result.stdout.strip()
    return url if result.returncode == 0 and _GITHUB.match(url) else None


def binder_url(repository: Repository, notebook: str) -> str:
    """The mybinder.org link that opens ``notebook`` (a path relative to the course root) in JupyterLab."""
    return f"{BINDER}/{repository.owner}/{repository.name}/{quote(repository.branch, safe='')}" \
           f"?labpath={quote(notebook, safe='')}"


def local_command(notebook: str) -> str:
    """What to type in a checkout of the course to run ``notebook`` on one's own machine."""
    return f"make lab   # then open {notebook}"
