#!/usr/bin/env bash
# The HTTP conformance suite: every reference app of clients/apps.json, started as listed there,
# driven over real HTTP (loopback) against real PostgreSQL servers:
#   native  pg_idem's library preloaded and CREATE EXTENSION (needs pg_idem installed into the
#           PostgreSQL whose pg_config is first in PATH: scripts/install.sh)
#   sql     the SQL edition (scripts/sql_edition.py's plain file) installed by a role that is no
#           superuser, as which the apps connect (as on a managed service)
#   pooler  the native server behind its own PgBouncer in transaction mode
#
#   clients/conformance/run.sh [--app NAME]... [--mode native|sql|pooler]... [-- PYTEST ARGS]
#
# Needs clients/setup.sh to have run (the packages, the Python venv with pytest and psycopg).
# Ends with "N passed, N failed, N skipped".
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
# shellcheck source=../../scripts/lib/pg.sh
source scripts/lib/pg.sh

apps=()
modes=()
pytest_args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --app) apps+=("$2"); shift 2 ;;
        --mode) modes+=("$2"); shift 2 ;;
        --) shift; pytest_args=("$@"); break ;;
        *) echo "usage: clients/conformance/run.sh [--app NAME]... [--mode native|sql|pooler]... [-- PYTEST ARGS]" >&2; exit 2 ;;
    esac
done
[ "${#modes[@]}" -gt 0 ] || modes=(native sql pooler)
python="$root/clients/python/.venv/bin/python"
[ -x "$python" ] || { echo "run.sh: $python is missing: run clients/setup.sh first" >&2; exit 1; }

work="$(mktemp -d /tmp/pg_idem_http.XXXXXX)"
chmod 755 "$work" # pg_start hands its directories to the postgres user, who must reach them
bouncer_pid=""
cleanup() {
    [ -n "$bouncer_pid" ] && { kill "$bouncer_pid" 2>/dev/null || true; wait "$bouncer_pid" 2>/dev/null || true; }
    for dir in "$work"/pg-*; do [ -d "$dir" ] && pg_stop "$dir"; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wants() { [[ " ${modes[*]} " == *" $1 "* ]]; }

if wants native || wants pooler; then
    [ -f "$("${PG_CONFIG:-pg_config}" --pkglibdir)/pg_idem.so" ] ||
        { echo "run.sh: pg_idem is not installed into $("${PG_CONFIG:-pg_config}" --bindir)'s PostgreSQL (scripts/install.sh)" >&2; exit 1; }
    pg_start "$work/pg-native" "shared_preload_libraries = 'pg_idem'" "max_connections = 200"
    psql -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION pg_idem'
    native_port="$PGPORT"
    export PG_IDEM_HTTP_DSN_NATIVE="postgresql://postgres@127.0.0.1:$native_port/postgres"
fi

if wants sql; then
    python3 scripts/sql_edition.py --out "$work/sql-edition" >/dev/null
    pg_start "$work/pg-sql" "max_connections = 200"
    # the owner a managed service gives you: no superuser, owns its database
    psql -q -v ON_ERROR_STOP=1 -c 'CREATE ROLE app_owner LOGIN CREATEROLE' -c 'CREATE DATABASE app OWNER app_owner'
    psql -q -v ON_ERROR_STOP=1 -U app_owner -d app -1 -f "$work/sql-edition/pg_idem--0.5.0.sql" >/dev/null
    export PG_IDEM_HTTP_DSN_SQL="postgresql://app_owner@127.0.0.1:$PGPORT/app"
fi

if wants pooler; then
    pg_bouncer_start "$work/pgbouncer" "$native_port" postgres 8
    bouncer_pid="$BOUNCER_PID"
    bouncer_port="$BOUNCER_PORT"
    export PG_IDEM_HTTP_DSN_POOLER="postgresql://postgres@127.0.0.1:$bouncer_port/postgres"
fi

export PG_IDEM_HTTP_MODES="${modes[*]}"
export PG_IDEM_HTTP_APPS="${apps[*]:-}"
# clients/pytest_plain_summary.py ends the output with the plain line scripts/test.sh counts
rc=0
# the apps of each mode side by side: PG_IDEM_HTTP_JOBS pytest-xdist workers (default 3; 0 runs
# the suite in this process), each app's tests in one worker (conftest.py)
jobs="${PG_IDEM_HTTP_JOBS:-3}"
workers=()
[ "$jobs" = 0 ] || workers=(-n "$jobs" --dist loadgroup)
PYTHONPATH="$root/clients" "$python" -m pytest -p no:cacheprovider -p pytest_plain_summary -q -rfE \
    "${workers[@]}" "$here" "${pytest_args[@]}" || rc=$?
exit $rc
