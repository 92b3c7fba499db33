#!/usr/bin/env bash
# Installs Debian's Go toolchain and the driver and routers the reference app and the tests use
# (lib/pq, chi, gorilla/mux) when missing, and builds the reference app offline into
# clients/go/bin/pg-idem-reference. The library (clients/go) needs nothing but the standard
# library; the reference module's go.mod requires the published modules, and this script points
# them at Debian's sources under /usr/share/gocode through a generated go.mod of its own
# (go build -modfile), so no go.mod in the repository names a path on this machine. Idempotent.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
gocode=/usr/share/gocode/src/github.com
need=()
command -v go >/dev/null || need+=(golang-go)
[ -d "$gocode/lib/pq" ] || need+=(golang-github-lib-pq-dev)
[ -d "$gocode/go-chi/chi" ] || need+=(golang-github-go-chi-chi-dev)
[ -d "$gocode/gorilla/mux" ] || need+=(golang-github-gorilla-mux-dev)
if [ "${#need[@]}" -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# build/go.mod: the reference module's go.mod with Debian's sources in place of the proxy
build="$here/reference/build"
mkdir -p "$build"
cp "$here/reference/go.mod" "$build/go.mod"
cat >>"$build/go.mod" <<MOD

replace github.com/lib/pq => $gocode/lib/pq
replace github.com/go-chi/chi/v5 => $gocode/go-chi/chi
replace github.com/gorilla/mux => $gocode/gorilla/mux
MOD
: >"$build/go.sum"
export GOFLAGS="-mod=mod -modfile=$build/go.mod" GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local
# go needs a build cache: under $HOME unless told, and CI may run without HOME
[ -n "${GOCACHE:-}" ] || [ -n "${HOME:-}" ] || export GOCACHE=/tmp/pg_idem_go_cache
cd "$here/reference"
go build -o "$here/bin/pg-idem-reference" ./cmd/pg-idem-reference
echo "clients/go ready: clients/go/bin/pg-idem-reference"
