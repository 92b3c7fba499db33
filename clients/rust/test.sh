#!/usr/bin/env bash
# The crate's unit tests (the contract's vectors, and that contract.json is the source's copy),
# tests/database.rs and tests/tls.rs against a throwaway server with pg_idem's SQL edition and
# TLS on (started here unless PG_IDEM_HTTP_TEST_DSN names a database; PG_IDEM_HTTP_TLS_CA then
# names its CA), clippy with warnings as errors, and the published form: `cargo package`, then
# the .crate unpacked in a temporary directory and built there offline (from the registry cache,
# into the workspace's target dir, so only the crate itself compiles; its bin and example are
# checked, not linked). Prints cargo's own summaries, then one closing line
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
# the package as crates.io would get it: its file list, and that it builds from those files alone
unpacked="$(mktemp -d /tmp/pg_idem_http_crate.XXXXXX)"
# --allow-dirty: the test command runs on work not yet committed; what is checked is the files
# the package holds and that they build, not git state
if cargo package -q -p pg-idem-http --no-verify --allow-dirty &&
    tar -xzf target/package/pg-idem-http-*.crate -C "$unpacked" &&
    (cd "$unpacked"/pg-idem-http-* &&
        # the .crate's files carry a fixed old mtime: without this, cargo would take the last
        # unpacked build's outputs as fresh and check nothing
        find . -type f -exec touch {} + &&
        # the library is built; the bin and the example only checked, so that their executables
        # do not replace the workspace's target/debug ones (same names, other source path)
        CARGO_TARGET_DIR="$OLDPWD/target" cargo build -q --offline --lib &&
        CARGO_TARGET_DIR="$OLDPWD/target" cargo check -q --offline --bins --examples); then
    passed=$((passed + 1))
else
    rc=1; failed=$((failed + 1))
fi
rm -rf "$unpacked"
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=1   # a build failure runs no test at all
echo "$passed passed, $failed failed, $ignored skipped"
exit "$rc"
