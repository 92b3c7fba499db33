#!/usr/bin/env bash
# Runs the isolation specs of tests/isolation with PostgreSQL's isolation tester
# (pg_isolation_regress, from postgresql-server-dev) against a throwaway PostgreSQL server. Needs
# pg_idem installed into that PostgreSQL. The server does not preload pg_idem: fences are then the
# values of idem.fence_seq, which each spec resets, so the expected outputs can print them; with
# the preload they come from a clock in shared memory (src/store/fences.rs), whose rules the client
# suites test (crash, replica). Claims, completions and every interleaving are the same either way.
# Non-interactive; works as root (the server then runs as the postgres OS user); loopback only.
#
#   tests/isolation/run.sh                 every spec listed in tests/isolation/schedule
#   tests/isolation/run.sh claim-claim ... only these specs
#
# Exits non-zero when any spec fails (its regression.diffs is printed) or when the run could
# not be set up. The last line is always "N passed, N failed", counting specs.
#
# Environment: PG_ISOLATION_REGRESS overrides the path of pg_isolation_regress;
# KEEP_OUTPUT=1 keeps the output directory (it is kept anyway when a spec fails).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# shellcheck source=../../scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"

if [ "$#" -gt 0 ]; then
    tests=("$@")
    total="$#"
else
    tests=(--schedule="$here/schedule")
    total="$(sed -n 's/^test:[[:space:]]*//p' "$here/schedule" | wc -w)"
fi

work="$(mktemp -d /tmp/pg_idem_isolation.XXXXXX)"
chmod 755 "$work" # the server, running as postgres, lives below it
server="$work/server"
out="$work/output"
mkdir -p "$out"
keep_output="${KEEP_OUTPUT:-0}"
summary_printed=0

cleanup() {
    local rc=$?
    pg_stop "$server" >/dev/null 2>&1 || true
    if [ "$keep_output" != 1 ]; then
        rm -rf "$work"
    fi
    if [ "$summary_printed" = 0 ]; then
        # set-up failed before any spec ran
        echo "0 passed, $total failed"
        [ "$rc" -eq 0 ] && rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT

find_regress() {
    if [ -n "${PG_ISOLATION_REGRESS:-}" ]; then
        echo "$PG_ISOLATION_REGRESS"
        return
    fi
    local pgxs candidate
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
    echo "pg_isolation_regress not found: install postgresql-server-dev-15" >&2
    return 1
}
regress="$(find_regress)"

pg_start "$server" "lc_messages = 'C'"

dbname=isolation_regression
psql_() { "$PG_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 "$@" >/dev/null; }
psql_ -d postgres \
    -c "CREATE DATABASE $dbname TEMPLATE template0" \
    -c "ALTER DATABASE $dbname SET lc_messages TO 'C'" \
    -c "ALTER DATABASE $dbname SET timezone TO 'UTC'"
psql_ -d "$dbname" -c "CREATE EXTENSION pg_idem"

# --use-existing: pg_isolation_regress neither creates nor drops the database
status=0
"$regress" --use-existing --host="$PGHOST" --port="$PGPORT" --user="$PGUSER" \
    --dbname="$dbname" --inputdir="$here" --outputdir="$out" "${tests[@]}" \
    >"$out/summary.txt" 2>&1 || status=$?
cat "$out/summary.txt"

# "test x ... ok" up to PostgreSQL 15, TAP ("ok 1 - x") from 16 on
passed="$(grep -Ec ' \.\.\. ok |^ok [0-9]+ ' "$out/summary.txt" || true)"
failed=$((total - passed))
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ]; then
    keep_output=1
    if [ -s "$out/regression.diffs" ]; then
        echo "----- regression.diffs -----"
        cat "$out/regression.diffs"
    fi
    echo "output kept in $out"
    [ "$status" -eq 0 ] && status=1
fi
[ "$keep_output" = 1 ] && [ "$status" -eq 0 ] && echo "output kept in $out"
echo "$passed passed, $failed failed"
summary_printed=1
exit "$status"
