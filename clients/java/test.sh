#!/usr/bin/env bash
# The package's tests: the contract's vectors (and that its contract.json is the source's copy),
# the JSON reader, the configuration rules, and the filter over real HTTP (embedded Tomcat,
# java.net.http) against a throwaway PostgreSQL with pg_idem's SQL edition (started here unless
# PG_IDEM_HTTP_TEST_DSN names a database). (The jar, its pom and the sources jar: pack.sh,
# checked by clients/release-check.sh.) Builds first (build.sh, offline). Ends with
# "N passed, N failed, N skipped" (what clients/test.sh adds up); exits non-zero on any failure.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../.." || exit 1
out="$(mktemp)"
server=""
cleanup() {
    rm -f "$out"
    [ -z "$server" ] || pg_stop "$server"
}
trap cleanup EXIT
"$here/build.sh" || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
if [ -z "${PG_IDEM_HTTP_TEST_DSN:-}" ]; then
    # shellcheck source=../../scripts/lib/pg.sh
    source scripts/lib/pg.sh
    server="$(mktemp -d /tmp/pg_idem_http_java.XXXXXX)"
    pg_start "$server" || exit 1
    install_file="$(sql_edition_file "$server/sql-edition")" || exit 1
    psql -q -v ON_ERROR_STOP=1 -1 -f "$install_file" >/dev/null || exit 1
    export PG_IDEM_HTTP_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres"
fi

J=/usr/share/java
# shellcheck source=version.sh
source "$here/version.sh"
version="$(pom_version)"
jar="$here/build/pg-idem-http-$version.jar"
rc=0
java -Dpgidem.contract="$here/../contract.json" -jar "$J/junit-platform-console-standalone.jar" \
    --class-path "$here/build/test-classes:$jar:$here/build/reference.jar:$J/tomcat10-embed-core.jar:$J/postgresql.jar" \
    --scan-class-path --disable-banner --disable-ansi-colors --details=tree 2>&1 | tee "$out"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
# [        19 tests successful      ]
count() { sed -n "s/^\[ *\([0-9]*\) tests $1 *\]$/\1/p" "$out" | tail -n 1; }
passed="$(count successful)"
failed="$(count failed)"
skipped="$(count skipped)"
aborted="$(count aborted)"
passed="${passed:-0}" failed="$(( ${failed:-0} + ${aborted:-0} ))" skipped="${skipped:-0}"
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=1   # the runner failed without a failed test

echo "$passed passed, $failed failed, $skipped skipped"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
