#!/usr/bin/env bash
# Runs the isolation specs of tests/isolation against a throwaway PostgreSQL server with
# pg_idem preloaded, with PostgreSQL's isolation tester (pg_isolation_regress, from
# postgresql-server-dev). Needs pg_idem installed into that PostgreSQL. Non-interactive; works
# as root (the server then runs as the postgres OS user). Last line: "N passed, N failed".
#
#   tests/isolation/run.sh                 all specs in tests/isolation/schedule
#   tests/isolation/run.sh claim-claim ... only these specs
#
# Environment: PG_ISOLATION_REGRESS overrides the path of pg_isolation_regress;
# KEEP_OUTPUT=1 keeps the output directory (it is kept anyway when a spec fails).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"

find_regress() {
    if [ -n "${PG_ISOLATION_REGRESS:-}" ]; then
        echo "$PG_ISOLATION_REGRESS"
        return
    fi
    local pgxs
    pgxs="$(pg_config --pgxs 2>/dev/null || true)"
    for candidate in \
        "${pgxs:+$(dirname "$(dirname "$pgxs")")/test/isolation/pg_isolation_regress}" \
        "$PG_BINDIR/../lib/pgxs/src/test/isolation/pg_isolation_regress" \
        /usr/lib/postgresql/15/lib/pgxs/src/test/isolation/pg_isolation_regress; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then
            echo "$candidate"
            return
        fi
    done
    echo "pg_isolation_regress not found (install postgresql-server-dev-15)" >&2
    return 1
}
regress="$(find_regress)"

work="$(mktemp -d /tmp/pg_idem_isolation.XXXXXX)"
server="$work/server"
out="$work/output"
keep_output="${KEEP_OUTPUT:-0}"
cleanup() {
    pg_stop "$server" || true
    if [ "$keep_output" = 1 ]; then
        echo "output kept in $out" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

mkdir -p "$out"
chmod 755 "$work"
# pg_idem.database names the database of the purge worker: keep it away from the test database
pg_start "$server" "shared_preload_libraries = 'pg_idem'" "pg_idem.database = 'postgres'" \
    "max_connections = 50" "lc_messages = 'C'"

dbname=isolation_regression
psql -X -q -v ON_ERROR_STOP=1 -d postgres \
    -c "CREATE DATABASE $dbname TEMPLATE template0" \
    -c "ALTER DATABASE $dbname SET lc_messages TO 'C'" \
    -c "ALTER DATABASE $dbname SET timezone TO 'UTC'" >/dev/null
psql -X -q -v ON_ERROR_STOP=1 -d "$dbname" -c "CREATE EXTENSION pg_idem" >/dev/null

if [ "$#" -gt 0 ]; then
    tests=("$@")
else
    tests=(--schedule="$here/schedule")
fi

status=0
"$regress" --use-existing --host="$PGHOST" --port="$PGPORT" --user="$PGUSER" \
    --dbname="$dbname" --inputdir="$here" --outputdir="$out" "${tests[@]}" \
    >"$out/summary.txt" 2>&1 || status=$?
cat "$out/summary.txt"

passed="$(grep -Ec '^(ok|test) .* \.\.\. ok ' "$out/summary.txt" || true)"
failed="$(grep -Ec '\.\.\. FAILED' "$out/summary.txt" || true)"
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ "$passed" -eq 0 ]; then
    keep_output=1
    if [ -s "$out/regression.diffs" ]; then
        echo "----- regression.diffs -----"
        cat "$out/regression.diffs"
    fi
    [ "$failed" -eq 0 ] && failed=1
    echo "$passed passed, $failed failed"
    exit 1
fi
echo "$passed passed, $failed failed"
