#!/usr/bin/env bash
# The package's tests (pytest), ending with the plain "N passed, N failed, N skipped" line that
# clients/test.sh adds up: the contract's vectors, the middleware and the decorator over real
# HTTP on a throwaway PostgreSQL with pg_idem (scripts/lib/pg.sh; needs pg_idem installed into
# the PostgreSQL whose pg_config is first in PATH), the README's SQLAlchemy recipe, ruff and
# mypy. (The sdist and the wheel: pack.sh, checked by clients/release-check.sh.) Needs ./setup.sh.
set -uo pipefail
cd "$(dirname "$0")" || exit 1
[ -x .venv/bin/python ] || { echo "clients/python/test.sh: run clients/python/setup.sh first" >&2; exit 1; }
# shellcheck source=../../scripts/lib/pg.sh
source ../../scripts/lib/pg.sh
work="$(mktemp -d /tmp/pg_idem_http_py.XXXXXX)"
chmod 755 "$work" # pg_start hands its directory to the postgres user
trap 'pg_stop "$work/pg" >/dev/null 2>&1; rm -rf "$work"' EXIT
pg_start "$work/pg" "shared_preload_libraries = 'pg_idem'" >/dev/null ||
    { echo "clients/python/test.sh: could not start PostgreSQL with pg_idem" >&2; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
export PG_IDEM_HTTP_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
# clients/pytest_plain_summary.py prints the closing line clients/test.sh counts
PYTHONPATH=.. .venv/bin/python -m pytest -p no:cacheprovider -p pytest_plain_summary -q tests "$@"
