#!/usr/bin/env bash
# Checks the Debian package without installing it: the machine's own PostgreSQL 15, and any
# pg_idem installed into it (by a package, scripts/install.sh or the demo), stay as they are.
#
#   tests/release/deb.sh          builds it first (scripts/package.sh deb)
#   tests/release/deb.sh DEB      checks DEB (tests/release/run.sh: the release's)
#
# What it checks: the metadata (`dpkg-deb -f`: name, version, architecture, Depends naming
# postgresql-15 and the package of every library pg_idem.so links), the file list
# (`dpkg-deb -c`: exactly the library, the control file, the install and upgrade scripts and
# the docs, owned by root with Debian's modes) and the contents, unpacked with `dpkg-deb -x`
# (pg_idem.control with this version as default_version, the upgrade scripts as in sql/, a
# PostgreSQL 15 library). Then it copies Debian's PostgreSQL 15 (/usr/lib/postgresql/15 and
# /usr/share/postgresql/15) into a temporary directory, takes any pg_idem out of the copy, puts
# the package's files in (its binaries find share/ and lib/ relative to their own location:
# checked with the copy's pg_config and on a running server), and runs scripts/demo.sh against
# that copy. Last, that the system's PostgreSQL 15 directories were not touched.
# Prints "ok"/"not ok" per check and "N passed, N failed" at the end, as the other runners.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root="$(pwd)"

version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
name=postgresql-15-pg-idem
sys_lib=/usr/lib/postgresql/15/lib
sys_share=/usr/share/postgresql/15

# shellcheck source=tests/release/lib.sh
source tests/release/lib.sh

# what pg_idem files the system's PostgreSQL 15 has, with their checksums and modes, and
# whether the package is installed: compared at the end
system_state() {
    dpkg-query -W -f='${Status} ${Version}\n' "$name" 2>/dev/null || echo "$name: not installed"
    find "$sys_lib" "$sys_share/extension" -maxdepth 1 -name 'pg_idem*' -printf '%p %m %U %T@\n' 2>/dev/null | sort
    find "$sys_lib" "$sys_share/extension" -maxdepth 1 -name 'pg_idem*' -type f -exec sha256sum {} + 2>/dev/null | sort
}
before="$(system_state)"

deb="${1:-}"
if [ -z "$deb" ]; then
    deb="$(scripts/package.sh deb)" || { check "scripts/package.sh deb builds the package" false; finish; }
fi
check "the package exists: $deb" test -s "$deb"
[ -s "$deb" ] || finish

work="$(mktemp -d /tmp/pg_idem_package.XXXXXX)"
chmod 755 "$work"
cleanup() {
    [ -n "${server:-}" ] && pg_stop "$server"
    rm -rf "$work"
}
trap cleanup EXIT

# --- metadata ------------------------------------------------------------------------------
field() { dpkg-deb -f "$deb" "$1"; }
check "Package: $name" test "$(field Package)" = "$name"
check "Version: $version (Cargo.toml)" test "$(field Version)" = "$version"
check "Architecture: amd64" test "$(field Architecture)" = amd64
depends="$(field Depends)"
depends_on() { [[ ", $depends," == *", $1"[,\ ]* ]] || { echo "Depends: $depends"; return 1; }; }
check "Depends names postgresql-15" depends_on postgresql-15
dpkg-deb -I "$deb"

# --- the file list ---------------------------------------------------------------------------
ext=./usr/share/postgresql/15/extension
expected_files() {
    echo "-rwxr-xr-x root/root ./usr/lib/postgresql/15/lib/pg_idem.so"
    echo "-rw-r--r-- root/root $ext/pg_idem.control"
    echo "-rw-r--r-- root/root $ext/pg_idem--$version.sql"
    for script in sql/pg_idem--*--*.sql; do
        echo "-rw-r--r-- root/root $ext/$(basename "$script")"
    done
    echo "-rw-r--r-- root/root ./usr/share/doc/$name/README.md"
    for page in docs/*.md; do
        echo "-rw-r--r-- root/root ./usr/share/doc/$name/$page"
    done
    echo "-rw-r--r-- root/root ./usr/share/doc/$name/copyright"
}
listed_files() {
    dpkg-deb -c "$deb" | awk '$1 !~ /^d/ { print $1, $2, $6 }'
    dpkg-deb -c "$deb" | awk '$1 ~ /^d/ && ($1 != "drwxr-xr-x" || $2 != "root/root") { print "directory:", $1, $2, $6 }'
}
check "the files, their modes and owners are exactly the expected ones" \
    diff <(expected_files | sort) <(listed_files | sort)
dpkg-deb -c "$deb"

# --- the contents ----------------------------------------------------------------------------
unpacked="$work/unpacked"
check "dpkg-deb -x unpacks it" dpkg-deb -x "$deb" "$unpacked"
uext="$unpacked/usr/share/postgresql/15/extension"
so="$unpacked/usr/lib/postgresql/15/lib/pg_idem.so"
check "pg_idem.control is the source's, with default_version = '$version'" \
    diff <(sed "s/@CARGO_VERSION@/$version/" pg_idem.control) "$uext/pg_idem.control"
check "pg_idem.control: default_version = '$version'" grep -qx "default_version = '$version'" "$uext/pg_idem.control"
for script in sql/pg_idem--*--*.sql; do
    check "$(basename "$script") is the source's" cmp "$script" "$uext/$(basename "$script")"
done
install_script_ok() {
    local f="$uext/pg_idem--$version.sql"
    grep -q 'FUNCTION "idem_claim"\|FUNCTION idem_claim' "$f" || { echo "no idem_claim in $f"; return 1; }
    ! grep -n '@[A-Z_]*@' "$f" || { echo "placeholders left in $f"; return 1; }
}
check "pg_idem--$version.sql creates idem_claim, no placeholders left" install_script_ok
check "the README in the docs is the source's" cmp README.md "$unpacked/usr/share/doc/$name/README.md"
check "the docs/ pages the README links to are the source's" diff -r docs "$unpacked/usr/share/doc/$name/docs"
library_ok() {
    readelf -h "$so" | grep -q 'Type: *DYN' || { readelf -h "$so"; return 1; }
    readelf -h "$so" | grep -q 'Machine: *Advanced Micro Devices X86-64' || { readelf -h "$so"; return 1; }
    nm -D --defined-only "$so" | grep -qw Pg_magic_func || { echo "no Pg_magic_func"; return 1; }
    nm -D --defined-only "$so" | grep -qw idem_claim_wrapper || { echo "no idem_claim_wrapper"; return 1; }
}
check "pg_idem.so: an x86-64 shared object with PostgreSQL's magic block and idem_claim" library_ok
# every library pg_idem.so links is found, and its package is in Depends
libraries_ok() {
    local rc=0 line lib path pkg
    while read -r line; do
        lib="$(awk '{ print $1 }' <<<"$line")"
        case "$line" in *"not found"*) echo "$lib not found"; rc=1; continue ;; esac
        path="$(awk '$2 == "=>" { print $3 }' <<<"$line")"
        [ -n "$path" ] || continue # the vdso and the loader
        pkg="$(dpkg -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1)"
        [ -n "$pkg" ] || { echo "$path: in no package"; rc=1; continue; }
        depends_on "$pkg" >/dev/null || { echo "$lib ($pkg) is not in Depends: $depends"; rc=1; }
    done < <(ldd "$so")
    return $rc
}
check "every library pg_idem.so needs is found, its package in Depends" libraries_ok

# --- a copy of Debian's PostgreSQL 15 with the package in it ---------------------------------
copy="$work/pg"
make_copy() {
    mkdir -p "$copy/usr/lib/postgresql" "$copy/usr/share/postgresql" &&
        cp -a /usr/lib/postgresql/15 "$copy/usr/lib/postgresql/" &&
        cp -a "$sys_share" "$copy/usr/share/postgresql/" &&
        rm -f "$copy/usr/lib/postgresql/15/lib"/pg_idem* "$copy/usr/share/postgresql/15/extension"/pg_idem* &&
        cp -a "$unpacked/usr/." "$copy/usr/"
}
check "a copy of /usr/lib/postgresql/15 and $sys_share with only the package's pg_idem" make_copy
bindir="$copy/usr/lib/postgresql/15/bin"
relocated() {
    local got
    for dir in bindir:"$bindir" sharedir:"$copy/usr/share/postgresql/15" pkglibdir:"$copy/usr/lib/postgresql/15/lib"; do
        got="$("$bindir/pg_config" --"${dir%%:*}")"
        [ "$got" = "${dir#*:}" ] || { echo "pg_config --${dir%%:*}: $got, not ${dir#*:}"; return 1; }
    done
}
check "the copy's pg_config reports the copy's directories" relocated

export PG_CONFIG="$bindir/pg_config" PG_BINDIR="$bindir" PATH="$bindir:$PATH"
# shellcheck source=../../scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"
server="$work/server"
check "a server from the copy loads the package's library and installs version $version" served_from_copy "$server" "$version"
pg_stop "$server"
server=""
check_shown "scripts/demo.sh --installed runs against the copy" scripts/demo.sh --installed --pg-bindir "$bindir"

check "the system's PostgreSQL 15 and its pg_idem are as they were" diff <(echo "$before") <(system_state)
finish
