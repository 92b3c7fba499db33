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
    # its own configuration and port, no Unix socket; Debian's pgbouncer service is not touched
    bouncer_dir="$work/pgbouncer"
    mkdir -p "$bouncer_dir"
    bouncer_port="$(pg_free_port)"
    echo '"postgres" ""' >"$bouncer_dir/userlist.txt"
    printf '%s\n' \
        "[databases]" \
        "postgres = host=127.0.0.1 port=$native_port dbname=postgres" \
        "[pgbouncer]" \
        "listen_addr = 127.0.0.1" \
        "listen_port = $bouncer_port" \
        "unix_socket_dir =" \
        "auth_type = trust" \
        "auth_file = $bouncer_dir/userlist.txt" \
        "pool_mode = transaction" \
        "default_pool_size = 8" \
        "max_client_conn = 400" \
        "logfile = $bouncer_dir/pgbouncer.log" >"$bouncer_dir/pgbouncer.ini"
    if [ "$(id -u)" = 0 ]; then
        chown -R postgres "$bouncer_dir"
        setpriv --reuid=postgres --regid=postgres --init-groups "$(command -v pgbouncer)" -q "$bouncer_dir/pgbouncer.ini" &
    else
        pgbouncer -q "$bouncer_dir/pgbouncer.ini" &
    fi
    bouncer_pid=$!
    for _ in $(seq 100); do
        psql -q -h 127.0.0.1 -p "$bouncer_port" -U postgres -d postgres -c 'SELECT 1' >/dev/null 2>&1 && break
        sleep 0.1
    done
    export PG_IDEM_HTTP_DSN_POOLER="postgresql://postgres@127.0.0.1:$bouncer_port/postgres"
fi

export PG_IDEM_HTTP_MODES="${modes[*]}"
export PG_IDEM_HTTP_APPS="${apps[*]:-}"
rc=0
"$python" -m pytest -p no:cacheprovider -q -rfE --junitxml="$work/junit.xml" "$here" "${pytest_args[@]}" || rc=$?
# the plain closing line scripts/test.sh counts (pytest's own line is decorated)
"$python" - "$work/junit.xml" <<'PY'
import sys
import xml.etree.ElementTree as ET
suites = ET.parse(sys.argv[1]).getroot()
suites = [suites] if suites.tag == "testsuite" else list(suites)
tests = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(f"{tests - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
