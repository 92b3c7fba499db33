#!/usr/bin/env bash
# Builds the package as npm gets it into the folder OUT, and prints the file's path:
#   pg-idem-http-<version>.tgz    `npm pack`: what package.json's `files` lists, and the
#                                 repository's LICENSE (copied in by the prepack script)
# clients/release.sh runs it; clients/release-check.sh checks what it makes.
#   clients/node/pack.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "$1" && pwd)"
cd "$here"
tarball="$(npm pack --silent --pack-destination "$out" | tail -n 1)"
[ -f "$out/$tarball" ] || { echo "clients/node/pack.sh: npm pack made no $out/$tarball" >&2; exit 1; }
echo "$out/$tarball"
