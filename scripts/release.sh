#!/usr/bin/env bash
# Builds every artifact of a pg_idem release into one folder (default
# target/dist/pg_idem-<version>; --out DIR to choose), emptied first:
#
#   native/postgresql-15-pg-idem_<v>_amd64.deb      Debian 12's PostgreSQL 15
#   native/pg_idem-<v>-pgNN-linux-x86_64.tar.gz     PostgreSQL 14, 16, 17, 18: the same files and
#                                                   an install.sh (scripts/package.sh)
#   sql/pg_idem--<v>.sql, sql/pg_idem--<v>.tle.sql  the SQL edition: plain install, pg_tle
#   sql/pg_idem--<old>--<v>.sql, .tle.sql           its updates from every earlier release
#   pgxn/pg_idem-<v>.zip                            the source distribution for PGXN, its META.json
#                                                   validated by PGXN's own validator (pgxn_meta)
#   clients/...                                     the HTTP packages: wheel and sdist, npm tarball,
#                                                   .crate, jar and pom, Go module zip
#                                                   (clients/release.sh)
#   RELEASE-NOTES.md                                this version's section of CHANGELOG.md
#   LICENSE
#   SHA256SUMS                                      every file above: `sha256sum -c SHA256SUMS`
#
#   scripts/release.sh [--out DIR] [--pg "15 18"]
#
# --pg limits the native builds to those majors (default: every supported one; each is a release
# build, fat LTO: a few minutes of CPU each). The test command's release step runs this and checks
# every artifact from the artifact alone (tests/release/run.sh).
#
# The sources are the tree as it is: a release is cut from a clean checkout of its tag. With
# uncommitted changes the PGXN zip holds the tracked files as they are in the working tree
# (`git stash create`), and this script says so on stderr. Prints the folder's path on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
out="$root/target/dist/pg_idem-$version"
majors=("${SUPPORTED_PG[@]}")
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out="$(realpath -m "$2")"; shift ;;
        --pg) read -r -a majors <<<"$2"; shift ;;
        *) echo "usage: scripts/release.sh [--out DIR] [--pg \"15 18\"]" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "release: $*" >&2; }

# what the builds need: the PostgreSQL versions, cargo-pgrx, pgxn_meta (quick when present)
scripts/setup.sh --release "${majors[@]}"

# the version is one fact in three files: Cargo.toml, META.json (twice), the changelog's heading
meta_version() { python3 -c 'import json,sys; m=json.load(open("META.json")); print(m["version"], m["provides"]["pg_idem"]["version"])'; }
[ "$(meta_version)" = "$version $version" ] || { say "META.json says $(meta_version), Cargo.toml $version"; exit 1; }

rm -rf "$out"
mkdir -p "$out/native" "$out/sql" "$out/pgxn" "$out/clients"

# --- the native edition ----------------------------------------------------------------------
targets=()
for major in "${majors[@]}"; do
    if [ "$major" = 15 ]; then targets+=(deb); else targets+=("$major"); fi
done
say "native builds for PostgreSQL ${majors[*]}"
scripts/package.sh --out "$out/native" "${targets[@]}" >/dev/null

# --- the SQL edition ---------------------------------------------------------------------------
say "the SQL edition"
python3 scripts/sql_edition.py --out "$out/sql" --updates >/dev/null

# --- PGXN: the source tree, under pg_idem-<v>/ --------------------------------------------------
say "the PGXN zip"
"${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta" META.json >&2 || { say "META.json is not valid for PGXN"; exit 1; }
tree="$(git -c user.name=release -c user.email=release@localhost stash create)"
if [ -n "$tree" ]; then
    say "uncommitted changes: the PGXN zip holds the working tree's tracked files, not a commit"
else
    tree=HEAD
fi
git archive --format=zip --prefix="pg_idem-$version/" -o "$out/pgxn/pg_idem-$version.zip" "$tree"

# --- the HTTP packages -------------------------------------------------------------------------
say "the HTTP packages"
# their build tools (the Python package builds with its dev venv's `build`); the test command has
# run clients/setup.sh already
[ -x clients/python/.venv/bin/python ] || clients/setup.sh >&2
clients/release.sh "$out/clients" >/dev/null

# --- notes, licence, checksums -------------------------------------------------------------------
# this version's section of CHANGELOG.md: from its "## " heading to the next one
awk -v v="$version" '
    /^## / { inside = (index($0, v) > 0) }
    inside { print }' CHANGELOG.md >"$out/RELEASE-NOTES.md"
[ -s "$out/RELEASE-NOTES.md" ] || { say "CHANGELOG.md has no section for $version"; exit 1; }
cp LICENSE "$out/LICENSE"
(cd "$out" && find . -type f ! -name SHA256SUMS -printf '%P\n' | LC_ALL=C sort | xargs sha256sum >SHA256SUMS)
say "done: $(find "$out" -type f | wc -l) files"
echo "$out"
