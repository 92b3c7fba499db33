#!/usr/bin/env bash
# Checks a native tarball of the release (PostgreSQL 14, 16, 17, 18) from the tarball alone:
#
#   tests/release/tarball.sh pg_idem-<v>-pgNN-linux-x86_64.tar.gz
#
# Its file list (the library, the control file, the install and update scripts, install.sh and
# LICENSE, under one folder); install.sh refusing another major's pg_config and writing nothing
# there. Then a copy
# of that version's PostgreSQL (scripts/lib/versions.sh's relocatable tree) with every pg_idem
# file taken out, the tarball's install.sh run with the copy's pg_config, a server started from
# the copy with the preload (it maps the copy's pg_idem.so: PostgreSQL refuses a library built
# for another major), CREATE EXTENSION at this version,
# idem_version(), a claim, and scripts/demo.sh against the copy. Last line "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root="$(pwd)"
# shellcheck source=../../scripts/lib/versions.sh
source scripts/lib/versions.sh
# shellcheck source=tests/release/lib.sh
source tests/release/lib.sh

tarball="$(realpath "$1")"
version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
name="$(basename "$tarball" .tar.gz)"
major="$(sed -nE "s/^pg_idem-$version-pg([0-9]+)-linux-x86_64\$/\1/p" <<<"$name")"
check "the name says pg_idem $version and a major: $name" test -n "$major"
[ -n "$major" ] || finish

work="$(mktemp -d /tmp/pg_idem_tarball.XXXXXX)"
chmod 755 "$work"
server=""
# shellcheck disable=SC2317  # called by the trap
cleanup() {
    [ -z "$server" ] || pg_stop "$server"
    rm -rf "$work"
}
trap cleanup EXIT

expected_files() {
    local script
    printf '%s\n' "$name/" "$name/LICENSE" "$name/install.sh" "$name/lib/" "$name/lib/pg_idem.so" \
        "$name/share/" "$name/share/extension/" "$name/share/extension/pg_idem.control" \
        "$name/share/extension/pg_idem--$version.sql"
    for script in sql/pg_idem--*--*.sql; do echo "$name/share/extension/$(basename "$script")"; done
}
check "exactly the library, the control file, the SQL scripts, install.sh and LICENSE" \
    diff <(expected_files | sort) <(tar -tzf "$tarball" | sort)
check "tar unpacks it" tar -xzf "$tarball" -C "$work"
bundle="$work/$name"
check "LICENSE is the repository's" cmp LICENSE "$bundle/LICENSE"
for script in sql/pg_idem--*--*.sql; do
    check "$(basename "$script") is the source's" cmp "$script" "$bundle/share/extension/$(basename "$script")"
done
check "pg_idem.control: default_version = '$version'" \
    grep -qx "default_version = '$version'" "$bundle/share/extension/pg_idem.control"
# install.sh into another major's PostgreSQL (one of the test command's own trees, never the
# machine's 15): refused, nothing written there
other=18
[ "$major" != 18 ] || other=17
refuses_other_major() {
    local pg_config before
    pg_config="$(pg_bindir "$other")/pg_config"
    state() { find "$("$pg_config" --pkglibdir)" "$("$pg_config" --sharedir)/extension" -maxdepth 1 -name 'pg_idem*' -type f -exec sha256sum {} + | sort; }
    before="$(state)"
    ! PG_CONFIG="$pg_config" "$bundle/install.sh" >"$work/other.out" 2>&1 || { cat "$work/other.out"; return 1; }
    grep -q "this build is for PostgreSQL $major" "$work/other.out" || { cat "$work/other.out"; return 1; }
    [ "$(state)" = "$before" ] || { echo "pg_idem's files in PostgreSQL $other changed"; return 1; }
}
check "install.sh refuses PostgreSQL $other's pg_config and writes nothing there" refuses_other_major

# --- a copy of PostgreSQL NN with the tarball installed by its install.sh --------------------------
copy="$work/pg"
make_copy() {
    cp -a "$(dirname "$(pg_bindir "$major")")" "$copy" &&
        rm -f "$copy/lib/pg_idem.so" "$copy/lib/postgresql/pg_idem.so" \
            "$copy"/share/extension/pg_idem* "$copy"/share/postgresql/extension/pg_idem*
}
check "a copy of PostgreSQL $major without pg_idem" make_copy
bindir="$copy/bin"
installed() {
    PG_CONFIG="$bindir/pg_config" "$bundle/install.sh" &&
        test -f "$("$bindir/pg_config" --pkglibdir)/pg_idem.so" &&
        case "$("$bindir/pg_config" --pkglibdir)" in "$copy"/*) ;; *) echo "pg_config --pkglibdir is outside the copy"; false ;; esac
}
check_shown "install.sh installs it into the copy" installed

export PG_CONFIG="$bindir/pg_config" PG_BINDIR="$bindir" PATH="$bindir:$PATH"
# shellcheck source=../../scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"
server="$work/server"
check "a server from the copy loads its pg_idem.so and installs version $version" served_from_copy "$server" "$version"
pg_stop "$server"
server=""
check_shown "scripts/demo.sh --installed runs against the copy" scripts/demo.sh --installed --pg-bindir "$bindir"
finish
