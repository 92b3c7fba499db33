#!/usr/bin/env bash
# Copies clients/contract.json, the one source of the HTTP contract, into each package (which must
# ship it to be installable on its own). Each package's tests fail when its copy differs.
set -euo pipefail
cd "$(dirname "$0")"
for copy in python/src/pg_idem_http/contract.json node/contract.json rust/contract.json \
    java/src/main/resources/io/github/pgidem/http/contract.json; do
    mkdir -p "$(dirname "$copy")"
    cp contract.json "$copy"
done
