#!/usr/bin/env bash
# Builds pg_idem's packages (release builds) into target/packages/:
#   postgresql-15-pg-idem_<version>_amd64.deb    Debian 12's PostgreSQL 15: files where Debian's own
#                                                extension packages put theirs
#   pg_idem-<version>-pgNN-linux-x86_64.tar.gz   any other supported version: lib/, share/extension/
#                                                and an install.sh that copies them into the
#                                                PostgreSQL its pg_config (or $PG_CONFIG) names
#
#   scripts/package.sh            the .deb and a tarball for every other supported version
#   scripts/package.sh deb 17     only these (deb, or majors)
#   scripts/package.sh --out DIR ...   into DIR instead (scripts/release.sh)
#   scripts/package.sh sql        the SQL edition: pg_idem--<version>.sql (plain install) and
#                                 pg_idem--<version>.tle.sql (pg_tle), for managed PostgreSQL, and
#                                 the updates from every earlier release of it,
#                                 pg_idem--<old>--<version>.sql and .tle.sql (from 0.5.0, its
#                                 first, on)
#
# Upgrade scripts (sql/pg_idem--A--B.sql) are in every package; the frozen 0.1.0 install script is
# not (new installs get the current version).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
out="$root/target/packages"
if [ "${1:-}" = --out ]; then
    out="$(realpath -m "$2")"
    shift 2
fi
mkdir -p "$out"
targets=("$@")
if [ "${#targets[@]}" = 0 ]; then
    targets=(deb)
    for major in "${SUPPORTED_PG[@]}"; do [ "$major" = 15 ] || targets+=("$major"); done
fi

# stage PG_CONFIG DIR: a release build laid out as the target file system under DIR
stage() {
    rm -rf "$2"
    cargo pgrx package --pg-config "$1" --out-dir "$2" >&2
}

deb() {
    local staging="$out/deb-root" name="postgresql-15-pg-idem" doc
    stage /usr/bin/pg_config "$staging"
    doc="$staging/usr/share/doc/$name"
    mkdir -p "$doc" "$staging/DEBIAN"
    cp README.md "$doc/README.md"
    # the pages the README links to, at the same relative path
    mkdir -p "$doc/docs"
    cp docs/*.md "$doc/docs/"
    # the whole licence, from LICENSE: each line indented by one space, a blank line as " ."
    # (Debian's copyright format)
    {
        cat <<COPYRIGHT
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: pg_idem

Files: *
Copyright: 2026 pg_idem developers
License: PostgreSQL
COPYRIGHT
        sed -e 's/^$/./' -e 's/^/ /' LICENSE
    } >"$doc/copyright"
    cat >"$staging/DEBIAN/control" <<CONTROL
Package: $name
Version: $version
Architecture: amd64
Maintainer: pg_idem developers <maintainers@pg-idem.dev>
Depends: postgresql-15, libc6, libgcc-s1
Section: database
Priority: optional
Installed-Size: $(du -sk "$staging/usr" | cut -f1)
Description: exactly-once effects for PostgreSQL 15
 pg_idem keeps idempotency keys, leases and fencing tokens in the caller's own
 transaction: idem_claim inside the business transaction, idem_complete before it
 commits. Load it with shared_preload_libraries = 'pg_idem', then CREATE EXTENSION pg_idem.
CONTROL
    find "$staging" -type d -exec chmod 755 {} +
    find "$staging/usr" -type f -exec chmod 644 {} +
    find "$staging/usr" -name '*.so' -exec chmod 755 {} +
    dpkg-deb --root-owner-group --build "$staging" "$out/${name}_${version}_amd64.deb" >&2
    rm -rf "$staging"
    echo "$out/${name}_${version}_amd64.deb"
}

tarball() {
    local major="$1" staging="$out/stage-pg$1" name="pg_idem-$version-pg$1-linux-x86_64"
    local pg_config bundle
    ensure_pg "$major"
    pg_config="$(pg_bindir "$major")/pg_config"
    stage "$pg_config" "$staging"
    bundle="$out/$name"
    rm -rf "$bundle"
    mkdir -p "$bundle/lib" "$bundle/share/extension"
    cp "$staging$("$pg_config" --pkglibdir)/pg_idem.so" "$bundle/lib/"
    cp "$staging$("$pg_config" --sharedir)/extension/"pg_idem* "$bundle/share/extension/"
    cat >"$bundle/install.sh" <<INSTALL
#!/bin/sh
# Installs pg_idem $version for PostgreSQL $major into the PostgreSQL that pg_config (or
# \$PG_CONFIG) names. Run it as a user that may write there.
set -eu
cd "\$(dirname "\$0")"
pg_config="\${PG_CONFIG:-pg_config}"
major="\$("\$pg_config" --version | sed -E 's/[^0-9]*([0-9]+).*/\\1/')"
[ "\$major" = "$major" ] || { echo "this build is for PostgreSQL $major, \$pg_config is \$major" >&2; exit 1; }
install -m 755 lib/pg_idem.so "\$("\$pg_config" --pkglibdir)/pg_idem.so"
install -m 644 share/extension/* "\$("\$pg_config" --sharedir)/extension/"
echo "pg_idem $version installed into \$("\$pg_config" --pkglibdir)"
INSTALL
    chmod 755 "$bundle/install.sh"
    cp LICENSE "$bundle/LICENSE"
    tar czf "$out/$name.tar.gz" -C "$out" "$name"
    rm -rf "$staging" "$bundle"
    echo "$out/$name.tar.gz"
}

for target in "${targets[@]}"; do
    case "$target" in
        deb | 15) deb ;;
        # the SQL edition (managed PostgreSQL): the plain install and the pg_tle package
        sql) python3 scripts/sql_edition.py --out "$out" --updates ;;
        *) tarball "$target" ;;
    esac
done
