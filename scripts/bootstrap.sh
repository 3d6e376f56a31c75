#!/usr/bin/env bash
# Create or refresh the project virtualenv (.venv in the repo root) on a machine where
# nothing was installed by hand: only a python3.11+ on PATH is required.
#
# Re-runs are cheap: when .venv/.kraft-audit-stamp holds the sha256 of pyproject.toml
# (i.e. the dependencies have not changed since the last successful install) and the
# venv's python still runs, nothing is installed and the script exits in well under 1 s.
# The stamp is written only after a successful install, so an interrupted run retries.
#
# Env: KRAFT_AUDIT_PYTHON=/path/to/python  forces the interpreter used to create .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
STAMP="$VENV/.kraft-audit-stamp"

say() { echo "bootstrap: $*" >&2; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then sha256sum "$1" | cut -d' ' -f1
    else shasum -a 256 "$1" | cut -d' ' -f1; fi   # macOS
}

want="$(sha256_of pyproject.toml)"

# Fast path: nothing changed.
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] && "$VENV/bin/python" -c '' 2>/dev/null; then
    say "$VENV is up to date (pyproject.toml unchanged), skipping install"
    exit 0
fi

find_python() {
    local cand
    # 3.11 first: the pinned stack was measured on 3.11 (numpy 2.4.6 needs >= 3.11).
    for cand in ${KRAFT_AUDIT_PYTHON:-} python3.11 python3.12 python3.13 python3 python; do
        # A pyenv shim can exist for a version that is not installed: run it, don't trust `command -v`.
        if command -v "$cand" >/dev/null 2>&1 &&
           "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

if ! "$VENV/bin/python" -c '' 2>/dev/null; then
    py="$(find_python)" || { say "ERROR: no python >= 3.11 found on PATH (set KRAFT_AUDIT_PYTHON)"; exit 1; }
    say "creating $VENV with $(command -v "$py") ($("$py" -V 2>&1))"
    rm -rf "$VENV"    # a broken venv (e.g. its base interpreter was removed) is recreated
    "$py" -m venv "$VENV"
else
    say "reusing $VENV ($("$VENV/bin/python" -V 2>&1)); dependencies changed or never installed"
fi

say "upgrading pip"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
say "installing the project: pip install -e '.[test]'"
"$VENV/bin/python" -m pip install --quiet -e '.[test]'
# the project's bytecode ahead of time (an editable install compiles none; with PYTHONDONTWRITEBYTECODE set, every
# command would compile ~50 modules' source again: ~0.2 s of each command's start-up here)
say "compiling the project's Python bytecode"
"$VENV/bin/python" -m compileall -q controller_core audit lake jobs transforms simulator conf > /dev/null
# numba compiles the kernels at first use (~30 s) and caches them: pay it here, not in the first command
say "compiling the kernels (numba, cached for later runs)"
# (the embedded default scenario: the large-log loops and the int64 layout compiled too)
"$VENV/bin/python" -c "from controller_core.kernels import warm; warm('data/default-cluster')"

echo "$want" > "$STAMP"
say "done: $VENV ready"
