#!/usr/bin/env bash
# The golden SQL tests (pg_regress): every error's SQLSTATE, message, detail and hint, `\df` and
# the full declaration of every function, the settings, and the usage examples (docs/) as they
# print. Runs against a throwaway server of the PostgreSQL that PG_CONFIG (or pg_config on PATH)
# names, with the installed pg_idem preloaded.
#
#   tests/pg_regress/run.sh            run, and show the diff of any test that fails
#   tests/pg_regress/run.sh --accept   run, then copy the results over expected/ (review the
#                                      diff with git before committing it)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=../../scripts/lib/pg.sh
source "$here/../../scripts/lib/pg.sh"

regress="$(dirname "$("${PG_CONFIG:-pg_config}" --pgxs)")/../test/regress/pg_regress"
[ -x "$regress" ] || { echo "pg_regress not found at $regress" >&2; exit 1; }
tests=(setup api errors usage)
dir="$(mktemp -d /tmp/pg_idem_regress.XXXXXX)"
chmod 777 "$dir"
trap 'pg_stop "$dir/server"; rm -rf "$dir"' EXIT
pg_start "$dir/server" "shared_preload_libraries = 'pg_idem'" "pg_idem.database = 'postgres'" \
    "lc_messages = 'C'" "timezone = 'UTC'"

"$PG_BINDIR/psql" -qX -c "CREATE DATABASE pg_idem_regress" || exit 1
out="$dir/out"
mkdir -p "$out"
chmod 777 "$out"
pg_run "$regress" --use-existing --host="$PGHOST" --port="$PGPORT" --user=postgres \
    --dbname=pg_idem_regress --inputdir="$here" --outputdir="$out" \
    --bindir="$PG_BINDIR" "${tests[@]}" >"$out/summary" 2>&1
rc=$?
cat "$out/summary"
failed=0
for t in "${tests[@]}"; do
    if ! diff -q "$here/expected/$t.out" "$out/results/$t.out" >/dev/null 2>&1; then
        failed=$((failed + 1))
        if [ "${1:-}" = --accept ]; then
            cp "$out/results/$t.out" "$here/expected/$t.out"
            echo "accepted: expected/$t.out"
        fi
    fi
done
[ -f "$out/regression.diffs" ] && [ "${1:-}" != --accept ] && cat "$out/regression.diffs"
echo "$((${#tests[@]} - failed)) passed, $failed failed"
[ "$failed" = 0 ] && [ "$rc" = 0 ] || [ "${1:-}" = --accept ]
