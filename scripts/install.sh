#!/usr/bin/env bash
# Builds pg_idem and installs it into the PostgreSQL that pg_config points at.
#
#   scripts/install.sh            release build (what the demo and the benchmarks use)
#   scripts/install.sh --debug    debug build (faster to compile; what the test suites use)
#
# Files are replaced by rename, never rewritten in place: a running server that has the old
# library mapped keeps working instead of crashing on a truncated file.
set -euo pipefail
cd "$(dirname "$0")/.."

profile_args=()
profile=release
if [ "${1:-}" = "--debug" ]; then
    profile_args=(--debug)
    profile=debug
fi

pg_config_bin="${PG_CONFIG:-$(command -v pg_config)}"
out="target/pgrx-package-$profile"
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
