#!/usr/bin/env bash
# Builds and runs the README's quick start (main.go in the current directory) as a reader would
# after `go mod init quickstart` and `go get`: here offline, with the module in MODULE_DIR (this
# checkout's clients/go unless given; clients/release-check.sh gives the released zip unpacked)
# and Debian's lib/pq and chi (clients/conformance/quickstart.py runs it). lib/pq has no
# sslmode=prefer: a DATABASE_URL without sslmode gets sslmode=disable (a loopback test server).
#   clients/go/run-quickstart.sh [MODULE_DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module_dir="$(cd "${1:-$here}" && pwd)"
gocode=/usr/share/gocode/src/github.com
cat >go.mod <<MOD
module quickstart

go 1.19

require (
	github.com/go-chi/chi/v5 v5.0.7
	github.com/lib/pq v1.10.7
	pg_idem/clients/go v0.0.0
)

replace pg_idem/clients/go => $module_dir
replace github.com/lib/pq => $gocode/lib/pq
replace github.com/go-chi/chi/v5 => $gocode/go-chi/chi
MOD
[ -n "${GOCACHE:-}" ] || [ -n "${HOME:-}" ] || export GOCACHE=/tmp/pg_idem_go_cache
GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off go build -o quickstart .
case "$DATABASE_URL" in *sslmode=*) ;; *\?*) DATABASE_URL="$DATABASE_URL&sslmode=disable" ;; *) DATABASE_URL="$DATABASE_URL?sslmode=disable" ;; esac
export DATABASE_URL
exec ./quickstart
