#!/usr/bin/env bash
# The Go package's checks: go vet of both modules and gofmt, the library's unit tests (every vector of its
# contract.json, and that the copy is the source's), and the reference module's tests over real
# HTTP against a throwaway PostgreSQL with pg_idem (native edition; started here unless
# PG_IDEM_HTTP_TEST_DSN names a database). Builds offline (clients/go/setup.sh first). Ends with
# one closing line "N passed, N failed, N skipped" (what clients/test.sh adds up).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$(mktemp)"
server=""
cleanup() {
    rm -f "$out"
    [ -z "$server" ] || pg_stop "$server"
    [ -z "$server" ] || rm -rf "$server"
}
trap cleanup EXIT
if [ -z "${PG_IDEM_HTTP_TEST_DSN:-}" ]; then
    # shellcheck source=../../scripts/lib/pg.sh
    source "$root/scripts/lib/pg.sh"
    server="$(mktemp -d /tmp/pg_idem_go.XXXXXX)"
    chmod 755 "$server"
    pg_start "$server" "shared_preload_libraries = 'pg_idem'" || exit 1
    psql -q -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION pg_idem' || exit 1
    export PG_IDEM_HTTP_TEST_DSN="postgresql://postgres@127.0.0.1:$PGPORT/postgres?sslmode=disable"
fi
export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local
[ -n "${GOCACHE:-}" ] || [ -n "${HOME:-}" ] || export GOCACHE=/tmp/pg_idem_go_cache
[ -f "$here/reference/build/go.mod" ] || { echo "clients/go/test.sh: run clients/go/setup.sh first"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }
rc=0
failed=0
(cd "$here" && go vet ./...) || { rc=1; failed=$((failed + 1)); }
unformatted="$(gofmt -l "$here")"
[ -z "$unformatted" ] || { echo "not gofmt-formatted: $unformatted"; rc=1; failed=$((failed + 1)); }
(cd "$here" && go test -count=1 -v ./...) 2>&1 | tee "$out"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
(cd "$here/reference" && GOFLAGS="-mod=mod -modfile=$here/reference/build/go.mod" go vet ./... &&
    GOFLAGS="-mod=mod -modfile=$here/reference/build/go.mod" go test -count=1 -v ./...) 2>&1 | tee -a "$out"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
passed=$(grep -cE '^\s*--- PASS' "$out")
failed=$((failed + $(grep -cE '^\s*--- FAIL' "$out")))
skipped=$(grep -cE '^\s*--- SKIP' "$out")
[ "$rc" = 0 ] || [ "$failed" -gt 0 ] || failed=1   # a build failure runs no test at all
echo "$passed passed, $failed failed, $skipped skipped"
exit "$rc"
