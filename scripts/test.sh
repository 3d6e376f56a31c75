#!/usr/bin/env bash
# Run the test suite in the project venv, creating/refreshing it first.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/jobs -k lake
# pytest's own exit code is returned (5 = "no tests collected" counts as a failure).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh

# The report's browser tests (tests/jobs/test_report.py) drive Debian's chromium through chromedriver:
# installed when missing, only as root or with password-less sudo.  When that cannot be done, one line, and
# the tests go on (the browser tests then skip, naming what is missing).
install_browser() {
    local run=()
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then run=(sudo -n)
        else echo "test: chromium / chromium-driver missing, not root and no sudo: the browser tests will skip" >&2; return 0; fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "test: chromium / chromium-driver missing and no apt-get: the browser tests will skip" >&2; return 0
    fi
    if ! { "${run[@]}" apt-get update -qq &&
           "${run[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; } \
           >/tmp/kraft-audit-apt.log 2>&1; then
        echo "test: apt-get install chromium chromium-driver failed (/tmp/kraft-audit-apt.log): the browser tests will skip" >&2
    fi
}
[[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] || install_browser

exec .venv/bin/python -m pytest -q "$@"
