#!/usr/bin/env bash
# Builds the crate as crates.io gets it into the folder OUT, and prints the file's path:
#   pg-idem-http-<version>.crate    `cargo package`: the files Cargo.toml's `include` lists,
#                                   the normalised Cargo.toml and the Cargo.lock
# --no-verify: clients/release-check.sh builds the .crate unpacked, offline, in a clean place;
# --allow-dirty: the test command packs work not yet committed (the .crate records it in its
# .cargo_vcs_info.json). clients/release.sh runs it.
#   clients/rust/pack.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "$1" && pwd)"
cd "$here/../.."
version="$(sed -nE 's/^version = "([^"]+)"/\1/p' "$here/Cargo.toml" | head -n 1)"
cargo package -q -p pg-idem-http --no-verify --allow-dirty >&2
crate="${CARGO_TARGET_DIR:-target}/package/pg-idem-http-$version.crate"
cp "$crate" "$out/"
echo "$out/pg-idem-http-$version.crate"
