#!/usr/bin/env bash
# The crate's unit tests (the contract's vectors, and that contract.json is the source's copy),
# tests/database.rs against a throwaway server with pg_idem's SQL edition (started here unless
# PG_IDEM_HTTP_TEST_DSN names a database), and clippy with warnings as errors. Prints cargo's own summaries, then one closing line
# "N passed, N failed, N skipped" (what clients/test.sh adds up); exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="$(mktemp)"
server=""
cleanup() {
    rm -f "$out"
    [ -z "$server" ] || pg_stop "$server"
}
trap cleanup EXIT
if [ -z "${PG_IDEM_HTTP_TEST_DSN:-}" ]; then
    # shellcheck source=../../scripts/lib/pg.sh
    source scripts/lib/pg.sh
    server="$(mktemp -d /tmp/pg_idem_http_rust.XXXXXX)"
    pg_start "$server" || exit 1
    python3 scripts/sql_edition.py --out "$server/sql-edition" >/dev/null || exit 1
    version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
    psql -q -v ON_ERROR_STOP=1 -1 -f "$server/sql-edition/pg_idem--$version.sql" >/dev/null || exit 1
    export PG_IDEM_HTTP_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
fi
rc=0
cargo test -p pg-idem-http 2>&1 | tee "$out"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# test result: ok. 11 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; ...
read -r passed failed ignored < <(awk '/^test result:/ {p += $4; f += $6; i += $8} END {print p+0, f+0, i+0}' "$out")
cargo clippy -q -p pg-idem-http --all-targets -- -D warnings || { rc=1; failed=$((failed + 1)); }
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=1   # a build failure runs no test at all
echo "$passed passed, $failed failed, $ignored skipped"
exit "$rc"
