#!/usr/bin/env bash
# Makes a "managed-style" PostgreSQL NN for the SQL edition's tests and prints its bin directory
# (the last line of stdout; everything else goes to stderr):
#
#   scripts/lib/managed_pg.sh NN        NN: 14, 15, 16, 17 or 18
#
# Managed services (Amazon RDS and Aurora, Supabase) run a PostgreSQL that has pg_tle (Trusted
# Language Extensions) and none of pg_idem's native files: the SQL edition is installed there with
# pgtle.install_extension, which refuses a name whose control file exists in the server's
# share/extension ("control file already exists for the pg_idem extension"). The trees the other
# tests use all have native pg_idem installed, so this makes a separate copy:
#
#   PG_IDEM_PG_CACHE/managed-NN (default /var/cache/pg_idem/managed-NN)
#     a copy of PostgreSQL NN: Debian's package for 15 (/usr/lib/postgresql/15,
#     /usr/share/postgresql/15 and the headers in /usr/include/postgresql, laid out under usr/
#     as on the system), the relocatable tree of scripts/lib/versions.sh for the others;
#     every pg_idem file taken out (pg_idem.control, pg_idem--*.sql, pg_idem.so);
#     pg_tle built and installed into it with ../shared/pg_tle/install.sh; pg_tle
#     marked trusted, as RDS lets its customers' administrator create it (see below).
#
# PostgreSQL's binaries find share/ and lib/ relative to their own location when the configured
# directories share a prefix with the configured bindir (Debian's: /usr/lib/postgresql/15/bin,
# /usr/share/postgresql/15, /usr/lib/postgresql/15/lib, /usr/include/postgresql/15/server, all
# under /usr), so a copy that keeps Debian's layout below a new usr/ runs from its copy, as
# tests/release/deb.sh does; the relocatable trees compute everything from their bin/. Checked
# below on the copy's pg_config, and the server's PKGLIBDIR/SHAREDIR by
# tests/sql_edition/managed_server.rs.
#
# Quick when already made: a stamp file records the source PostgreSQL's `postgres -V`, its path,
# the pg_tle tarball's checksum and this script's layout version; the copy is made again when any
# of them changed. Runs under a lock (several test processes may ask at once); the copy is built
# under a temporary name and renamed into place.
#
# Exit status 3 (with a message) when ../shared/pg_tle is missing: tests report themselves skipped.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
# shellcheck source=versions.sh
source "$root/scripts/lib/versions.sh"

major="${1:-}"
case "$major" in
    14 | 15 | 16 | 17 | 18) ;;
    *) echo "usage: $0 NN (14, 15, 16, 17 or 18)" >&2; exit 2 ;;
esac

tle="$root/../shared/pg_tle"
if [ ! -f "$tle/install.sh" ] || [ ! -f "$tle/pg_tle-1.5.3-src.tar.gz" ]; then
    echo "managed_pg: $tle (pg_tle's source and installer) is missing; managed-style tests need it" >&2
    exit 3
fi

# bump when the layout of the copy changes
layout=3
dest="$PG_IDEM_PG_CACHE/managed-$major"
if [ "$major" = 15 ]; then
    src_bindir=/usr/lib/postgresql/15/bin
    bindir="$dest/usr/lib/postgresql/15/bin"
else
    ensure_pg "$major" >&2
    src_bindir="$(pg_bindir "$major")"
    bindir="$dest/bin"
fi
[ -x "$src_bindir/postgres" ] || { echo "managed_pg: no PostgreSQL $major at $src_bindir" >&2; exit 1; }

stamp_text() {
    echo "layout $layout"
    echo "source $src_bindir"
    echo "postgres $("$src_bindir/postgres" -V)"
    echo "pg_tle $(sha256sum "$tle/pg_tle-1.5.3-src.tar.gz" | cut -d' ' -f1)"
}
want="$(stamp_text)"
stamp="$dest/.managed_pg.stamp"

# the checks a finished copy passes; prints what is wrong
verify() {
    local dir="$1" bin="$2" sharedir pkglibdir found
    sharedir="$("$bin/pg_config" --sharedir)" || return 1
    pkglibdir="$("$bin/pg_config" --pkglibdir)" || return 1
    case "$sharedir/" in "$dir"/*) ;; *) echo "pg_config --sharedir is $sharedir, not inside $dir"; return 1 ;; esac
    case "$pkglibdir/" in "$dir"/*) ;; *) echo "pg_config --pkglibdir is $pkglibdir, not inside $dir"; return 1 ;; esac
    [ -f "$sharedir/extension/pg_tle.control" ] || { echo "no pg_tle.control in $sharedir/extension"; return 1; }
    [ -f "$pkglibdir/pg_tle.so" ] || { echo "no pg_tle.so in $pkglibdir"; return 1; }
    [ ! -e "$sharedir/extension/pg_idem.control" ] || { echo "$sharedir/extension/pg_idem.control exists"; return 1; }
    found="$(find "$dir" -name 'pg_idem*' -not -path '*/include/*' | head -n 5)"
    [ -z "$found" ] || { echo "pg_idem files left: $found"; return 1; }
    "$bin/postgres" -V >/dev/null || { echo "$bin/postgres -V failed"; return 1; }
}

quick() {
    [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$bindir/postgres" ]
}

if quick; then
    echo "$bindir"
    exit 0
fi

mkdir -p "$PG_IDEM_PG_CACHE"
exec 9>"$PG_IDEM_PG_CACHE/managed-$major.lock"
flock 9
# another process may have made it while this one waited
if quick; then
    echo "$bindir"
    exit 0
fi

echo "managed_pg: making $dest (PostgreSQL $major without pg_idem, with pg_tle)" >&2
building="$dest.building.$$"
rm -rf "$building"
trap 'rm -rf "$building"' EXIT
mkdir -p "$building"
if [ "$major" = 15 ]; then
    # Debian's layout under usr/: the headers too, since pg_tle is built against the copy's
    # pg_config, which reports usr/include/postgresql/15/server inside the copy
    mkdir -p "$building/usr/lib/postgresql" "$building/usr/share/postgresql" "$building/usr/include"
    cp -a /usr/lib/postgresql/15 "$building/usr/lib/postgresql/"
    cp -a /usr/share/postgresql/15 "$building/usr/share/postgresql/"
    cp -a /usr/include/postgresql "$building/usr/include/"
    new_bindir="$building/usr/lib/postgresql/15/bin"
else
    cp -a "$(dirname "$src_bindir")/." "$building/"
    new_bindir="$building/bin"
fi

# every pg_idem file: the control file, install and upgrade scripts, the library (and any
# bitcode a build with LLVM left under lib/bitcode)
sharedir="$("$new_bindir/pg_config" --sharedir)"
pkglibdir="$("$new_bindir/pg_config" --pkglibdir)"
case "$sharedir/" in "$building"/*) ;; *) echo "managed_pg: the copy's pg_config reports sharedir $sharedir, outside the copy" >&2; exit 1 ;; esac
case "$pkglibdir/" in "$building"/*) ;; *) echo "managed_pg: the copy's pg_config reports pkglibdir $pkglibdir, outside the copy" >&2; exit 1 ;; esac
find "$building" -depth -name 'pg_idem*' -not -path '*/include/*' -exec rm -rf {} +

PG_CONFIG="$new_bindir/pg_config" "$tle/install.sh" >&2

# RDS and Aurora let their customers' administrator (rds_superuser, no superuser) run CREATE
# EXTENSION pg_tle (rds.allowed_extensions), the script running with the service's rights. The
# closest plain PostgreSQL has is a trusted extension: a role with CREATE on the database creates
# it, and its script runs as the bootstrap superuser. So the tests' DBA, who is no superuser,
# creates pg_tle in each database it makes. (amcheck stays untrusted: a trusted amcheck's
# functions would belong to the bootstrap superuser, which revokes them from everyone else; the
# tests' storage checks run as the service's superuser.)
control="$sharedir/extension/pg_tle.control"
[ -f "$control" ] || { echo "managed_pg: $control is missing" >&2; exit 1; }
grep -q '^trusted' "$control" || echo "trusted = true" >>"$control"

chmod -R a+rX "$building"
problem="$(verify "$building" "$new_bindir")" || { echo "managed_pg: the new copy is wrong: $problem" >&2; exit 1; }
echo "$want" >"$building/.managed_pg.stamp"

# into place: an old copy (another version) is moved aside first and removed
if [ -e "$dest" ]; then
    mv "$dest" "$dest.old.$$"
    rm -rf "$dest.old.$$"
fi
mv "$building" "$dest"
trap - EXIT
problem="$(verify "$dest" "$bindir")" || { echo "managed_pg: $dest is wrong after the move: $problem" >&2; exit 1; }
echo "managed_pg: made $dest" >&2
echo "$bindir"
