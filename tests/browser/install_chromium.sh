#!/usr/bin/env bash
# Make sure Debian's Chromium is at /usr/bin/chromium for the browser tests.
#
#   tests/browser/install_chromium.sh        # exit 0: installed (or already there)
#
# Exit status 0: /usr/bin/chromium is there. Exit status 3: it cannot be installed on
# this machine (not root, or no apt-get): the browser tests skip with the printed reason.
# Any other non-zero status: apt failed, and the tests fail with apt's output.
# Never downloads a browser build from Playwright (`playwright install`): Debian's package only.
set -euo pipefail

CHROMIUM=/usr/bin/chromium
if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "${EUID:-$(id -u)}" != 0 ]; then
    echo "chromium is missing and installing it needs root: run 'apt-get install -y chromium' as root" >&2
    exit 3
fi
if ! command -v apt-get >/dev/null; then
    echo "chromium is missing and there is no apt-get: install chromium at $CHROMIUM" >&2
    exit 3
fi

export DEBIAN_FRONTEND=noninteractive
apt_install() {
    apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends chromium
}
# The package lists may be missing or stale (a fresh container has none): update once, retry.
apt_install || { apt-get -o DPkg::Lock::Timeout=300 update -q && apt_install; }
test -x "$CHROMIUM"
