#!/usr/bin/env bash
# Checks the release's PGXN zip from the zip alone:
#
#   tests/release/pgxn.sh pg_idem-<v>.zip
#
# One top folder pg_idem-<v>/ holding the source tree (what `git ls-files` lists); its META.json
# valid by PGXN's own validator (`pgxn_meta`, from the pgxn_meta crate, which scripts/setup.sh
# installs with cargo), naming this version for the distribution and for the extension, the
# PostgreSQL licence, and files that exist in the zip (the control file, the docfile); the control
# file's default_version filled in by the build (@CARGO_VERSION@), the zip's LICENSE the
# repository's. Last line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=tests/release/lib.sh
source tests/release/lib.sh

zip="$(realpath "$1")"
version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
top="pg_idem-$version"
work="$(mktemp -d /tmp/pg_idem_pgxn.XXXXXX)"
trap 'rm -rf "$work"' EXIT

check "the name is pg_idem-$version.zip" test "$(basename "$zip")" = "$top.zip"
one_top_folder() {
    local tops
    tops="$(python3 -c 'import sys, zipfile; print("\n".join(sorted({n.split("/")[0] for n in zipfile.ZipFile(sys.argv[1]).namelist()})))' "$zip")"
    [ "$tops" = "$top" ] || { echo "top-level entries: $tops"; return 1; }
}
check "every entry is under $top/" one_top_folder
check "it unzips" python3 -m zipfile -e "$zip" "$work"
source_tree() {
    diff <(git ls-files | sort) <(cd "$work/$top" && find . -type f -printf '%P\n' | sort)
}
check "it holds exactly the tracked source files" source_tree
meta="$work/$top/META.json"
validator="$(command -v pgxn_meta || echo "${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta")"
check "META.json is valid by PGXN's validator ($validator)" "$validator" "$meta"
meta_says() {
    python3 - "$meta" "$version" "$work/$top" <<'PY'
import json, os, sys
meta, version, top = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
problems = []
if meta["version"] != version:
    problems.append(f"version {meta['version']}")
if meta.get("license") != "postgresql":
    problems.append(f"license {meta.get('license')}")
for name, ext in meta["provides"].items():
    if ext["version"] != version:
        problems.append(f"provides.{name}.version {ext['version']}")
    for field in ("file", "docfile"):
        if field in ext and not os.path.isfile(os.path.join(top, ext[field])):
            problems.append(f"provides.{name}.{field} {ext[field]} is not in the zip")
sys.exit("; ".join(problems) or None)
PY
}
check "META.json: version $version (distribution and extension), licence postgresql, its files exist" meta_says
check "pg_idem.control takes its default_version from the build (@CARGO_VERSION@)" \
    grep -qx "default_version = '@CARGO_VERSION@'" "$work/$top/pg_idem.control"
check "Cargo.toml in the zip says version $version" grep -qx "version = \"$version\"" "$work/$top/Cargo.toml"
check "LICENSE is the repository's" cmp LICENSE "$work/$top/LICENSE"
finish
