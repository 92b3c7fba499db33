#!/usr/bin/env bash
# Checks the SQL edition's files of the release from the files alone:
#
#   tests/release/sql_edition.sh SQLDIR
#
# SQLDIR holds pg_idem--<v>.sql (plain install), pg_idem--<v>.tle.sql (pg_tle) and the updates from
# every earlier SQL-edition release, pg_idem--<old>--<v>.sql and .tle.sql. On a throwaway
# PostgreSQL 15 without any pg_idem (Debian's binaries, no preload):
#   - the plain file installed with `psql -1 -f` by a role that is not a superuser, connected as
#     itself, into its own database; then another role, with nothing granted, claims, completes,
#     is replayed and is refused a mismatch; idem_version() is <v>;
#   - the released 0.5.0 (tests/sql_edition/released/, the starting point users have) updated with
#     the plain update file by its owner: idem_version() is <v>, and a key claimed before the
#     update is replayed after it.
# On a managed-style PostgreSQL 15 (pg_tle, no pg_idem file: scripts/lib/managed_pg.sh), where
# ../shared/pg_tle exists (reported as skipped elsewhere): the .tle.sql file run by a member of
# pgtle_admin who is not a superuser, CREATE EXTENSION pg_idem, a claim; and 0.5.0 through pg_tle
# updated with ALTER EXTENSION pg_idem UPDATE after the .tle.sql update file.
# Last line "N passed, N failed" (", N skipped" when pg_tle is missing).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root="$(pwd)"
# shellcheck source=tests/release/lib.sh
source tests/release/lib.sh

sqldir="$(realpath "$1")"
version="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
released=tests/sql_edition/released

work="$(mktemp -d /tmp/pg_idem_sql_release.XXXXXX)"
chmod 755 "$work"
server=""
cleanup() {
    [ -z "$server" ] || pg_stop "$server"
    rm -rf "$work"
}
trap cleanup EXIT

# the releases with an SQL edition before this one: those tests/sql_edition/released/ holds
earlier=()
for file in "$released"/pg_idem--*.tle.sql; do
    old="$(basename "$file" .tle.sql)"
    earlier+=("${old#pg_idem--}")
done
expected_files() {
    local old
    echo "pg_idem--$version.sql"
    echo "pg_idem--$version.tle.sql"
    for old in "${earlier[@]}"; do
        echo "pg_idem--$old--$version.sql"
        echo "pg_idem--$old--$version.tle.sql"
    done
}
check "the install files and an update from each earlier release (${earlier[*]})" \
    diff <(expected_files | sort) <(ls "$sqldir" | sort)

psql_as() { # ROLE DATABASE psql-args...: connected as ROLE itself
    local role="$1" db="$2"
    shift 2
    psql -X -q -At -v ON_ERROR_STOP=1 -U "$role" -d "$db" "$@"
}
# a claim, its completion, its replay and a mismatch by ROLE in DATABASE, with key KEY
claim_replay_mismatch() {
    local role="$1" db="$2" key="$3" got
    got="$(psql_as "$role" "$db" <<SQL
BEGIN;
SELECT outcome, fence FROM idem_claim('shop', '$key', idem_request_hash('{"qty": 1}')) \gset
\echo :outcome
SELECT idem_complete('shop', '$key', :fence, 201, '{"order_id": 1}') > now();
COMMIT;
SELECT outcome || ' ' || response_code FROM idem_claim('shop', '$key', idem_request_hash('{"qty": 1}'));
SELECT outcome FROM idem_claim('shop', '$key', idem_request_hash('{"qty": 2}'));
SQL
)" || return 1
    [ "$got" = "$(printf 'claimed\nt\ncompleted 201\nmismatch')" ] || { echo "got: $got"; return 1; }
}

# --- plain, on PostgreSQL 15 -----------------------------------------------------------------------
export PG_BINDIR=/usr/lib/postgresql/15/bin PATH="/usr/lib/postgresql/15/bin:$PATH"
# shellcheck source=../../scripts/lib/pg.sh
source "$root/scripts/lib/pg.sh"
server="$work/plain"
check_shown "a throwaway PostgreSQL 15 without the preload" pg_start "$server"
roles() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "CREATE ROLE idem_owner LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB" \
        -c "CREATE ROLE app LOGIN NOSUPERUSER" \
        -c "CREATE DATABASE shop OWNER idem_owner" -c "CREATE DATABASE old_shop OWNER idem_owner"
}
check "roles idem_owner (no superuser) and app, databases shop and old_shop" roles
plain_install() {
    psql_as idem_owner shop -1 -f "$sqldir/pg_idem--$version.sql" >/dev/null &&
        test "$(psql_as app shop -c 'SELECT idem_version()')" = "$version"
}
check "pg_idem--$version.sql installed by idem_owner; idem_version() is $version" plain_install
check "app (nothing granted) claims, completes, is replayed, gets a mismatch" claim_replay_mismatch app shop k1
for old in "${earlier[@]}"; do
    plain_update() {
        psql_as idem_owner old_shop -1 -f "$released/pg_idem--$old.sql" >/dev/null &&
            psql_as app old_shop -c "BEGIN" \
                -c "SELECT idem_complete('shop', 'before', (SELECT fence FROM idem_claim('shop', 'before', idem_request_hash('{}'))), 200, '\"kept\"')" \
                -c "COMMIT" >/dev/null &&
            psql_as idem_owner old_shop -1 -f "$sqldir/pg_idem--$old--$version.sql" >/dev/null 2>&1 &&
            test "$(psql_as app old_shop -c 'SELECT idem_version()')" = "$version" &&
            test "$(psql_as app old_shop -c "SELECT outcome || ' ' || response_body FROM idem_claim('shop', 'before', idem_request_hash('{}'))")" = 'completed "kept"'
    }
    check "the released $old updated by pg_idem--$old--$version.sql keeps its key; idem_version() is $version" plain_update
    check "and then claims, replays and refuses a mismatch" claim_replay_mismatch app old_shop k2
done
pg_stop "$server"
server=""

# --- pg_tle, on a managed-style PostgreSQL 15 ---------------------------------------------------------
managed_bindir="$(scripts/lib/managed_pg.sh 15 2>"$work/managed.err" | tail -n 1)"
if [ ! -x "$managed_bindir/postgres" ]; then
    cat "$work/managed.err"
    echo "SKIPPED: the pg_tle files: no managed-style server (../shared/pg_tle is missing)" |
        tee -a "${PG_IDEM_SKIP_LOG:-/dev/null}"
    # a skip is counted in passed too: scripts/test.sh takes PG_IDEM_SKIP_LOG's lines off it
    echo "$((passed + 1)) passed, $failed failed, 1 skipped"
    [ "$failed" = 0 ]
    exit
fi
export PG_BINDIR="$managed_bindir" PATH="$managed_bindir:$PATH"
server="$work/tle"
check_shown "a managed-style PostgreSQL 15 with pg_tle" pg_start "$server" "shared_preload_libraries = 'pg_tle'"
tle_roles() {
    psql -X -q -v ON_ERROR_STOP=1 -d postgres \
        -c "CREATE ROLE dba LOGIN NOSUPERUSER CREATEROLE" -c "CREATE ROLE app LOGIN NOSUPERUSER" \
        -c "CREATE DATABASE shop OWNER dba" -c "CREATE DATABASE old_shop OWNER dba" &&
        for db in shop old_shop; do
            psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION pg_tle" -c "GRANT pgtle_admin TO dba" || return 1
        done
}
check "pg_tle in databases shop and old_shop; dba (no superuser) in pgtle_admin" tle_roles
tle_install() {
    psql_as dba shop -f "$sqldir/pg_idem--$version.tle.sql" >/dev/null &&
        psql_as dba shop -c "CREATE EXTENSION pg_idem" &&
        test "$(psql_as app shop -c "SELECT extversion || ' ' || idem_version() FROM pg_extension WHERE extname = 'pg_idem'")" = "$version $version"
}
check "pg_idem--$version.tle.sql by dba, then CREATE EXTENSION pg_idem at $version" tle_install
check "app claims, completes, is replayed, gets a mismatch (pg_tle)" claim_replay_mismatch app shop k1
for old in "${earlier[@]}"; do
    tle_update() {
        psql_as dba old_shop -f "$released/pg_idem--$old.tle.sql" >/dev/null &&
            psql_as dba old_shop -c "CREATE EXTENSION pg_idem VERSION '$old'" &&
            psql_as dba old_shop -f "$sqldir/pg_idem--$old--$version.tle.sql" >/dev/null &&
            psql_as dba old_shop -c "ALTER EXTENSION pg_idem UPDATE" &&
            test "$(psql_as app old_shop -c "SELECT extversion || ' ' || idem_version() FROM pg_extension WHERE extname = 'pg_idem'")" = "$version $version"
    }
    check "pg_tle: $old updated with pg_idem--$old--$version.tle.sql and ALTER EXTENSION UPDATE" tle_update
done
finish
