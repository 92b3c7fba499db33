#!/usr/bin/env bash
# The package's unit tests (pytest), ending with the plain "N passed, N failed, N skipped" line
# that clients/test.sh adds up. Needs ./setup.sh to have run.
set -uo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || { echo "clients/python/test.sh: run clients/python/setup.sh first" >&2; exit 1; }
# clients/pytest_plain_summary.py prints the closing line clients/test.sh counts
PYTHONPATH=.. .venv/bin/python -m pytest -p no:cacheprovider -p pytest_plain_summary -q tests "$@"
