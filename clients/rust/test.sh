#!/usr/bin/env bash
# The crate's unit tests (the contract's vectors, and that contract.json is the source's copy),
# tests/database.rs and tests/tls.rs against a throwaway server with pg_idem's SQL edition and
# TLS on (started here unless PG_IDEM_HTTP_TEST_DSN names a database; PG_IDEM_HTTP_TLS_CA then
# names its CA) and clippy with warnings as errors. (The .crate: pack.sh, built unpacked offline
# by clients/release-check.sh.) Prints cargo's own summaries, then one closing line
# "N passed, N failed, N skipped" (what clients/test.sh adds up); exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
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
    # TLS for tests/tls.rs: a CA of its own and the server's certificate for 127.0.0.1
    mkdir -p "$server/tls"
    (cd "$server/tls" &&
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pg-idem-test-ca -keyout ca.key -out ca.pem &&
        openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout server.key -out server.csr &&
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
            -extfile <(echo "subjectAltName=IP:127.0.0.1") -out server.crt) >/dev/null 2>&1 || exit 1
    chmod 600 "$server/tls/server.key"
    [ "$(id -u)" = 0 ] && chown -R postgres "$server/tls"
    pg_start "$server" "ssl = on" "ssl_cert_file = '$server/tls/server.crt'" "ssl_key_file = '$server/tls/server.key'" || exit 1
    export PG_IDEM_HTTP_TLS_CA="$server/tls/ca.pem"
    install_file="$(sql_edition_file "$server/sql-edition")" || exit 1
    psql -q -v ON_ERROR_STOP=1 -1 -f "$install_file" >/dev/null || exit 1
    export PG_IDEM_HTTP_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
fi
rc=0
cargo test -p pg-idem-http --features tls-rustls 2>&1 | tee "$out"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# test result: ok. 11 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; ...
read -r passed failed ignored < <(awk '/^test result:/ {p += $4; f += $6; i += $8} END {print p+0, f+0, i+0}' "$out")
cargo clippy -q -p pg-idem-http --all-targets --features tls-rustls -- -D warnings || { rc=1; failed=$((failed + 1)); }
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=1   # a build failure runs no test at all
echo "$passed passed, $failed failed, $ignored skipped"
exit "$rc"
