#!/usr/bin/env bash
# Run the test suite in the project venv, creating/refreshing it first.
# Extra arguments go to pytest, e.g. scripts/test.sh tests/jobs -k lake
# pytest's own exit code is returned (5 = "no tests collected" counts as a failure).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
exec .venv/bin/python -m pytest -q "$@"
