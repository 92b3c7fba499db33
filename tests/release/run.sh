#!/usr/bin/env bash
# The release, built and checked from its artifacts alone (the test command's `release` step):
#
#   tests/release/run.sh          builds it with scripts/release.sh into a temporary folder
#   tests/release/run.sh DIR      checks the release folder DIR
#
# The folder: SHA256SUMS matches every file and lists them all; exactly the expected files for
# every supported PostgreSQL; RELEASE-NOTES.md is this version's CHANGELOG section and LICENSE
# the repository's. Then each artifact in a clean place:
#   native/*.deb        tests/release/deb.sh      unpacked into a copy of Debian's PostgreSQL 15, the demo
#   native/*.tar.gz     tests/release/tarball.sh  installed by its install.sh into a copy of its
#                                                 PostgreSQL (14, 16, 17, 18), the demo
#   sql/                tests/release/sql_edition.sh  installed by a non-superuser owner, plainly
#                                                 and through pg_tle, and the updates from 0.5.0
#   pgxn/*.zip          tests/release/pgxn.sh     META.json valid by PGXN's validator
#   clients/            clients/release-check.sh  each package installed in a clean place, its
#                                                 quick start run against the release's SQL edition
# Prints each part's lines, indented, and the sum "N passed, N failed, N skipped" last.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
# shellcheck source=../../scripts/lib/versions.sh
source scripts/lib/versions.sh
# shellcheck source=tests/release/lib.sh
source tests/release/lib.sh
skipped=0

version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
dir="${1:-}"
if [ -z "$dir" ]; then
    work="$(mktemp -d /tmp/pg_idem_release.XXXXXX)"
    trap 'rm -rf "$work"' EXIT
    check_shown "scripts/release.sh builds every artifact" scripts/release.sh --out "$work/pg_idem-$version"
    dir="$work/pg_idem-$version"
fi
dir="$(realpath "$dir")"
[ -d "$dir" ] || finish

# --- the folder ------------------------------------------------------------------------------------
sums_ok() {
    (cd "$dir" && sha256sum --quiet -c SHA256SUMS) || return 1
    diff <(cd "$dir" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort) \
        <(awk '{ print $2 }' "$dir/SHA256SUMS" | LC_ALL=C sort)
}
check "SHA256SUMS lists every file and each matches" sums_ok
expected_top() {
    local major
    for major in "${SUPPORTED_PG[@]}"; do
        if [ "$major" = 15 ]; then
            echo "native/postgresql-15-pg-idem_${version}_amd64.deb"
        else
            echo "native/pg_idem-$version-pg$major-linux-x86_64.tar.gz"
        fi
    done
    printf '%s\n' "pgxn/pg_idem-$version.zip" RELEASE-NOTES.md LICENSE SHA256SUMS
}
listed_top() { (cd "$dir" && find . -type f ! -path './sql/*' ! -path './clients/*' -printf '%P\n'); }
check "native/ has the .deb and a tarball for each other supported PostgreSQL; pgxn/, notes, LICENSE" \
    diff <(expected_top | sort) <(listed_top | sort)
check "LICENSE is the repository's" cmp LICENSE "$dir/LICENSE"
notes_ok() {
    head -n 1 "$dir/RELEASE-NOTES.md" | grep -q "^## .*$version" || { head -n 1 "$dir/RELEASE-NOTES.md"; return 1; }
    grep -q '^### ' "$dir/RELEASE-NOTES.md" || { echo "no ### section"; return 1; }
    [ "$(grep -c '^## ' "$dir/RELEASE-NOTES.md")" = 1 ] || { echo "more than one version's section"; return 1; }
}
check "RELEASE-NOTES.md is CHANGELOG.md's section for $version" notes_ok

# --- each artifact ----------------------------------------------------------------------------------
# part NAME CMD...: runs a checker, its lines indented, and adds its last "N passed, N failed[, N skipped]"
part() {
    local what="$1" out line p f s
    shift
    out="$(mktemp)"
    echo "== $what"
    "$@" 2>&1 | tee "$out" | sed 's/^/    /'
    line="$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)"
    rm -f "$out"
    if [ -z "$line" ]; then
        failed=$((failed + 1))
        echo "not ok - $what printed no count"
        return
    fi
    read -r p _ f _ s _ <<<"${line//,/}"
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + ${s:-0}))
}
part "the .deb" tests/release/deb.sh "$dir/native/postgresql-15-pg-idem_${version}_amd64.deb"
for tarball in "$dir"/native/*.tar.gz; do
    part "$(basename "$tarball")" tests/release/tarball.sh "$tarball"
done
part "the SQL edition's files" tests/release/sql_edition.sh "$dir/sql"
part "the PGXN zip" tests/release/pgxn.sh "$dir/pgxn/pg_idem-$version.zip"
part "the HTTP packages" clients/release-check.sh "$dir/clients" --sql "$dir/sql/pg_idem--$version.sql"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
