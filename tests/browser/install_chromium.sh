#!/usr/bin/env bash
# Make sure Debian's headless Chromium (package chromium-headless-shell) is at
# /usr/bin/chromium-headless-shell for the browser and hub tests (tests/headless_chromium.py).
#
#   tests/browser/install_chromium.sh        # exit 0: installed (or already there)
#
# Exit status 0: /usr/bin/chromium-headless-shell is there. Exit status 3: it cannot be installed on
# this machine (not root, or no apt-get): the browser tests skip with the printed reason.
# Any other non-zero status: apt failed, and the tests fail with apt's output.
# Never downloads a browser build from Playwright (`playwright install`): Debian's package only.
set -euo pipefail

PACKAGE=chromium-headless-shell
CHROMIUM=/usr/bin/chromium-headless-shell
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "${EUID:-$(id -u)}" != 0 ]; then
    echo "$PACKAGE is missing and installing it needs root: run 'apt-get install -y $PACKAGE' as root" >&2
    exit 3
fi
if ! command -v apt-get >/dev/null; then
    echo "$PACKAGE is missing and there is no apt-get: install Chromium's headless shell at $CHROMIUM" >&2
    exit 3
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "$PACKAGE"
}
# The package lists may be missing or stale (a fresh container has none): update once, retry.
apt_install || { apt-get -o DPkg::Lock::Timeout=300 update -q && apt_install; }
test -x "$CHROMIUM"
