#!/usr/bin/env bash
# Runs the isolation specs of tests/isolation with PostgreSQL's isolation tester
# (pg_isolation_regress, from postgresql-server-dev) against a throwaway PostgreSQL server. Needs
# pg_idem installed into that PostgreSQL (but for --path sql). The server does not preload
# pg_idem: fences are then the values of idem.fence_seq, which each spec resets, so the expected
# outputs can print them; with the preload they come from a clock in shared memory
# (src/store/fences.rs), whose rules the client suites test (crash, replica). Claims, completions
# and every interleaving are the same either way.
# Non-interactive; works as root (the server then runs as the postgres OS user); loopback only.
#
#   tests/isolation/run.sh                         every spec of tests/isolation/schedule, engine path
#   tests/isolation/run.sh claim-claim ...         only these specs
#   tests/isolation/run.sh --path spi [SPEC...]    on another of the three paths that write idem.keys:
#     engine  CREATE EXTENSION pg_idem; the native engine writes idem.keys's heap directly (the
#             default, what a plain install runs)
#     spi     CREATE EXTENSION pg_idem and a no-op row trigger on idem.keys: the engine cannot
#             write the table as the executor would (it would skip the trigger), so every call
#             takes the native SPI path (src/store/engine/choice.rs, src/store/spi.rs)
#     sql     the SQL edition's plain install (scripts/sql_edition.py, run as the superuser in
#             one transaction), the PL/pgSQL of managed PostgreSQL; no library is loaded
# Each run is one fresh server and database. Before the specs, one claim in an open transaction
# checks that the path is the one asked for: the engine takes no advisory lock for a key, the SPI
# path and the SQL edition hold one until commit.
#
# Expected outputs: tests/isolation/expected/NAME.out, unless tests/isolation/expected-PATH/NAME.out
# exists, which then replaces it for that path alone (an overlay holds only the files whose output
# differs on that path, and the spec says why in a comment). No path can pass with another path's
# output: pg_isolation_regress sees one expected directory, made for the run, and no alternative
# files (NAME_1.out) exist. An overlay file without a spec or equal to expected/ fails the run.
# Only what a path locks may differ: a decision that differs on one path (claimed, in_progress,
# a replay, a wait, a refused fence) is a bug of that path, and its expected file keeps the
# decision of the others.
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

usage() {
    echo "usage: tests/isolation/run.sh [--path engine|spi|sql] [SPEC...]${1:+ ($1)}" >&2
    echo "0 passed, 0 failed"
    exit 2
}
path=engine
specs=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        --path) [ "$#" -gt 1 ] || usage "--path needs a value"; path="$2"; shift ;;
        --path=*) path="${1#--path=}" ;;
        -*) usage "unknown option $1" ;;
        *) specs+=("$1") ;;
    esac
    shift
done
case "$path" in
    engine | spi | sql) ;;
    *) usage "no path '$path'" ;;
esac

if [ "${#specs[@]}" -gt 0 ]; then
    tests=("${specs[@]}")
    total="${#specs[@]}"
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
case "$path" in
    engine)
        psql_ -d "$dbname" -c "CREATE EXTENSION pg_idem"
        ;;
    spi)
        # Any row trigger but pg_idem's own (lift_fence_clock) makes the engine hand idem.keys
        # to the SPI path, whose INSERT, UPDATE and DELETE fire it (tests/behaviour/key_store.rs,
        # an_idem_keys_the_engine_cannot_write_takes_the_spi_path). This one does nothing.
        psql_ -d "$dbname" -c "CREATE EXTENSION pg_idem" \
            -c "CREATE FUNCTION public.isolation_no_op() RETURNS trigger LANGUAGE plpgsql AS
                  \$\$ BEGIN RETURN NULL; END \$\$" \
            -c "CREATE TRIGGER isolation_no_op AFTER INSERT OR UPDATE OR DELETE ON idem.keys
                  FOR EACH ROW EXECUTE FUNCTION public.isolation_no_op()"
        ;;
    sql)
        # as tests/harness/editions.rs installs it with PG_IDEM_EDITION=sql: the plain file in
        # one transaction, by the role that then owns pg_idem (here the superuser)
        python3 "$root/scripts/sql_edition.py" --out "$work/sql-edition" >/dev/null
        plain="$(find "$work/sql-edition" -maxdepth 1 -name 'pg_idem--*.sql' ! -name '*.tle.sql' ! -name '*--*--*')"
        [ -n "$plain" ] && [ "$(wc -l <<<"$plain")" = 1 ] ||
            { echo "scripts/sql_edition.py built no single plain install: $plain" >&2; exit 1; }
        psql_ -d "$dbname" -1 -f "$plain"
        # The purge in passing deletes expired keys at one call of eight, drawn from random()
        # (sql/edition/rules/purge.sql): purge-claim's expired key would be there or gone by chance.
        # Off, as the harness turns it off where a test decides when keys are purged
        # (tests/harness/server.rs); idem_purge() is what the specs call.
        psql_ -d "$dbname" -c "INSERT INTO idem.settings (name, value)
                                 VALUES ('pg_idem.purge_in_passing', 'off')
                               ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value"
        ;;
esac

# The path is the one asked for: a claim in an open transaction holds an advisory lock for its
# key on the SPI path and in the SQL edition, none on the engine path (rolled back; every spec
# resets idem.fence_seq and idem.keys)
held="$("$PG_BINDIR/psql" -X -q -At -v ON_ERROR_STOP=1 -d "$dbname" \
    -c "BEGIN" \
    -c "SELECT outcome FROM idem_claim('isolation', 'path-check', 'h')" \
    -c "SELECT count(*) FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND pid = pg_catalog.pg_backend_pid()" \
    -c "ROLLBACK")"
case "$path" in engine) want=$'claimed\n0' ;; *) want=$'claimed\n1' ;; esac
if [ "$held" != "$want" ]; then
    echo "not the $path path: a claim in an open transaction answered and held $(tr '\n' ' ' <<<"$held")advisory locks" >&2
    exit 1
fi

# one expected directory for this path: expected/, with expected-$path/ laid over it
input="$work/input"
mkdir -p "$input/expected"
ln -s "$here/specs" "$input/specs"
cp "$here"/expected/*.out "$input/expected/"
if [ -d "$here/expected-$path" ]; then
    for file in "$here/expected-$path"/*.out; do
        [ -e "$file" ] || continue
        name="$(basename "$file")"
        if [ ! -f "$here/specs/${name%.out}.spec" ]; then
            echo "expected-$path/$name: no spec ${name%.out}.spec" >&2
            exit 1
        fi
        if cmp -s "$file" "$here/expected/$name"; then
            echo "expected-$path/$name is expected/$name: remove it" >&2
            exit 1
        fi
        cp "$file" "$input/expected/$name"
    done
fi
if [ -n "$(find "$here"/expected* -name '*_[0-9].out')" ]; then
    echo "alternative expected files (NAME_1.out) would let one path pass with another's output" >&2
    exit 1
fi

# --use-existing: pg_isolation_regress neither creates nor drops the database
status=0
"$regress" --use-existing --host="$PGHOST" --port="$PGPORT" --user="$PGUSER" \
    --dbname="$dbname" --inputdir="$input" --outputdir="$out" "${tests[@]}" \
    >"$out/summary.txt" 2>&1 || status=$?
echo "path: $path"
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
