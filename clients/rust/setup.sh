#!/usr/bin/env bash
# Builds the crate, its reference app (target/debug/pg-idem-http-reference) and the README's quick
# start (target/debug/examples/quickstart) in the workspace's one target directory, fetching
# tokio, tokio-postgres, axum, ... from crates.io. Needs cargo (rustup). Idempotent: a second run
# only checks.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q -p pg-idem-http --bins --examples
echo "clients/rust ready: target/debug/pg-idem-http-reference"
