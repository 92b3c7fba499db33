#!/usr/bin/env bash
# The HTTP conformance suite: every reference app of clients/apps.json, started as listed there,
# driven over real HTTP (loopback) against real PostgreSQL servers:
#   native  pg_idem's library preloaded and CREATE EXTENSION (needs pg_idem installed into the
#           PostgreSQL whose pg_config is first in PATH: scripts/install.sh)
#   sql     the SQL edition (scripts/sql_edition.py's plain file) installed by a role that is no
#           superuser, as which the apps connect (as on a managed service)
#   pooler  the native server behind its own PgBouncer in transaction mode
# Every database's search_path puts another role's schema first, holding look-alikes of
# pg_idem's functions (hostile.sql). With the SQL edition, three more databases hold what an app
# must refuse to start on (test_startup.py): no pg_idem, an old version, a planted overload,
# no idem_version().
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
    psql -q -v ON_ERROR_STOP=1 -v schema=public -f "$here/hostile.sql"
    native_port="$PGPORT"
    export PG_IDEM_HTTP_DSN_NATIVE="postgresql://postgres@127.0.0.1:$native_port/postgres"
fi

if wants sql; then
    install_file="$(sql_edition_file "$work/sql-edition")"
    pg_start "$work/pg-sql" "max_connections = 200"
    # the owner a managed service gives you: no superuser, owns its database
    psql -q -v ON_ERROR_STOP=1 -c 'CREATE ROLE app_owner LOGIN CREATEROLE'
    for db in app app_old app_noversion app_planted app_empty; do
        psql -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db OWNER app_owner"
        [ "$db" = app_empty ] && continue
        psql -q -v ON_ERROR_STOP=1 -U app_owner -d "$db" -1 -f "$install_file" >/dev/null
    done
    psql -q -v ON_ERROR_STOP=1 -d app -v schema=public -f "$here/hostile.sql"
    # an install older than the contract's minimum version
    psql -q -v ON_ERROR_STOP=1 -U app_owner -d app_old \
        -c "CREATE OR REPLACE FUNCTION public.idem_version() RETURNS text LANGUAGE sql AS \$\$SELECT '0.4.0'\$\$"
    # an install from before idem_version() (the released 0.5.0 and older)
    psql -q -v ON_ERROR_STOP=1 -U app_owner -d app_noversion -c 'DROP FUNCTION public.idem_version()'
    # an overload of idem_claim another role planted in pg_idem's schema
    psql -q -v ON_ERROR_STOP=1 -d app_planted \
        -c 'CREATE FUNCTION public.idem_claim(integer) RETURNS integer LANGUAGE sql AS $$SELECT 1$$' \
        -c 'ALTER FUNCTION public.idem_claim(integer) OWNER TO mallory'
    sql_base="postgresql://app_owner@127.0.0.1:$PGPORT"
    export PG_IDEM_HTTP_DSN_SQL="$sql_base/app"
    export PG_IDEM_HTTP_DSN_OLD="$sql_base/app_old" PG_IDEM_HTTP_DSN_PLANTED="$sql_base/app_planted"
    export PG_IDEM_HTTP_DSN_EMPTY="$sql_base/app_empty" PG_IDEM_HTTP_DSN_NOVERSION="$sql_base/app_noversion"
fi

if wants pooler; then
    pg_bouncer_start "$work/pgbouncer" "$native_port" postgres 16
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
