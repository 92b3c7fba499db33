#!/usr/bin/env bash
# The Node.js package's tests (node --test): the contract's vectors, the engine's mapping on a
# scripted pool, Express and Fastify over real HTTP against a throwaway PostgreSQL with pg_idem
# (started here through scripts/lib/pg.sh unless PG_IDEM_NODE_TEST_DSN names one; skipped when
# pg_idem is not installed), the Knex recipe of the README; then the type check of the .d.ts
# (tsc --noEmit on test/types-usage.ts). (The packed tarball: pack.sh, checked installed in a
# clean directory by clients/release-check.sh.) Needs setup.sh. Ends with "N passed, N failed,
# N skipped".
set -uo pipefail
cd "$(dirname "$0")" || exit 1
root="$(cd ../.. && pwd)"
out="$(mktemp)"
work="$(mktemp -d /tmp/pg_idem_node.XXXXXX)"
chmod 755 "$work" # pg_start hands its directory to the postgres user
cleanup() {
    [ -d "$work/pg" ] && pg_stop "$work/pg"
    rm -rf "$work" "$out"
}
trap cleanup EXIT

if [ -z "${PG_IDEM_NODE_TEST_DSN:-}" ] && [ -f "$("${PG_CONFIG:-pg_config}" --pkglibdir)/pg_idem.so" ]; then
    # shellcheck source=../../scripts/lib/pg.sh
    source "$root/scripts/lib/pg.sh"
    pg_start "$work/pg" "shared_preload_libraries = 'pg_idem'" >/dev/null
    psql -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION pg_idem'
    export PG_IDEM_NODE_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
fi

node --test --test-reporter=spec test/*.test.js 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
count() { grep -aE "^ℹ $1 [0-9]+" "$out" | tail -n 1 | awk '{print $3}'; }
passed=$(count pass); failed=$(count fail); skipped=$(count skipped)
passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}
[ "$rc" = 0 ] || [ "$failed" != 0 ] || failed=1 # the runner itself failed

check() { # check NAME COMMAND...: one more passed or failed
    echo "$1"
    if "${@:2}"; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
}
check "tsc --noEmit (index.d.ts, fastify.d.ts against test/types-usage.ts)" npx --no-install tsc -p tsconfig.json
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
