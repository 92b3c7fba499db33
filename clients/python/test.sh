#!/usr/bin/env bash
# The package's unit tests (pytest), then the plain "N passed, N failed, N skipped" line that
# clients/test.sh adds up. Needs ./setup.sh to have run.
set -uo pipefail
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || { echo "clients/python/test.sh: run clients/python/setup.sh first" >&2; exit 1; }
junit="$(mktemp)"
trap 'rm -f "$junit"' EXIT
rc=0
.venv/bin/python -m pytest -p no:cacheprovider -q --junitxml="$junit" tests "$@" || rc=$?
.venv/bin/python - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    root = ET.parse(sys.argv[1]).getroot()
except ET.ParseError:
    print("0 passed, 1 failed, 0 skipped")
    sys.exit()
suites = [root] if root.tag == "testsuite" else list(root)
tests = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(f"{tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
