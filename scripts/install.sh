#!/usr/bin/env bash
# Builds pg_idem and installs it into the PostgreSQL that pg_config points at.
#
#   scripts/install.sh            release build (what the demo and the benchmarks use)
#   scripts/install.sh --debug    debug build (faster to compile; what the test suites use)
#   scripts/install.sh --pg 17    into PostgreSQL 17 (default: $PG_CONFIG, else pg_config on PATH)
#
# Files are replaced by rename, never rewritten in place: a running server that has the old
# library mapped keeps working instead of crashing on a truncated file.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

profile_args=()
profile=release
while [ $# -gt 0 ]; do
    case "$1" in
        --debug) profile_args=(--debug); profile=debug ;;
        --pg) use_pg "$2"; shift ;;
        *) echo "usage: scripts/install.sh [--debug] [--pg NN]" >&2; exit 2 ;;
    esac
    shift
done

pg_config_bin="${PG_CONFIG:-$(command -v pg_config)}"
major="$("$pg_config_bin" --version | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
out="target/pgrx-package-$profile-pg$major"
rm -rf "$out"
cargo pgrx package "${profile_args[@]}" --pg-config "$pg_config_bin" --out-dir "$out" >&2

# the package mirrors the target file system: $out/usr/lib/..., $out/usr/share/...
(cd "$out" && find . -type f) | while read -r file; do
    target="/${file#./}"
    sudo_if_needed=()
    [ -w "$(dirname "$target")" ] || sudo_if_needed=(sudo)
    "${sudo_if_needed[@]}" mkdir -p "$(dirname "$target")"
    "${sudo_if_needed[@]}" cp "$out/$file" "$target.new.$$"
    case "$target" in *.so) mode=755 ;; *) mode=644 ;; esac
    "${sudo_if_needed[@]}" chmod "$mode" "$target.new.$$"
    "${sudo_if_needed[@]}" mv -f "$target.new.$$" "$target"
done
echo "installed pg_idem ($profile) into $("$pg_config_bin" --pkglibdir)" >&2
