#!/usr/bin/env bash
# Builds every HTTP package's publishable artifact into the existing folder OUT and prints each
# file's path, one a line (progress goes to stderr), each package with its own pack.sh:
#   python   pg_idem_http-<v>.tar.gz, pg_idem_http-<v>-py3-none-any.whl   (PyPI)
#   node     pg-idem-http-<v>.tgz                                          (npm)
#   rust     pg-idem-http-<v>.crate                                        (crates.io)
#   java     pg-idem-http-<v>.jar, .pom, -sources.jar, -javadoc.jar        (Maven Central)
#   go       pg_idem-clients-go-v<v>.zip                                   (a Go module zip)
# The versions are the packages' own (pyproject.toml, package.json, Cargo.toml, pom.xml,
# clients/go/version.go). Offline from this machine's caches; needs clients/setup.sh to have
# run. scripts/release.sh runs it into its release folder's clients/; clients/release-check.sh
# checks the result.
#   clients/release.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ $# != 1 ] || [ ! -d "$1" ]; then
    echo "usage: clients/release.sh OUT (an existing folder)" >&2
    exit 2
fi
out="$(cd "$1" && pwd)"
for package in python node rust java go; do
    echo "== clients/$package: pack" >&2
    "$here/$package/pack.sh" "$out"
done
