# shellcheck shell=bash
# The release checks' counting, sourced by tests/release/*.sh: one "ok - ..." or "not ok - ..."
# line per check and "N passed, N failed" at the end, as the other runners print.
#
#   check DESCRIPTION CMD...        one check; CMD's output is shown (indented) only when it fails
#   check_shown DESCRIPTION CMD...  the same, with CMD's output shown as it runs
#   finish                          the last line, and exit 0 only when no check failed
#   served_from_copy DIR VERSION    a server in DIR from the PostgreSQL that PG_CONFIG and PATH
#                                   name (a copy with a package in it), pg_idem preloaded: it
#                                   maps that copy's pg_idem.so and reports the copy's PKGLIBDIR
#                                   and SHAREDIR, CREATE EXTENSION installs VERSION (extversion
#                                   and idem_version()), a claim answers; scripts/lib/pg.sh sourced

passed=0
failed=0
check() {
    local what="$1" out
    shift
    if out="$("$@" 2>&1)"; then
        passed=$((passed + 1))
        echo "ok - $what"
    else
        failed=$((failed + 1))
        echo "not ok - $what"
        [ -z "$out" ] || sed 's/^/    /' <<<"$out"
    fi
}
check_shown() {
    local what="$1"
    shift
    if "$@"; then
        passed=$((passed + 1))
        echo "ok - $what"
    else
        failed=$((failed + 1))
        echo "not ok - $what"
    fi
}
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" = 0 ]
    exit
}
served_from_copy() {
    local server="$1" version="$2" pid want got
    pg_start "$server" "shared_preload_libraries = 'pg_idem'" || return 1
    pid="$(head -n 1 "$server/data/postmaster.pid")"
    want="$("$PG_CONFIG" --pkglibdir)/pg_idem.so"
    got="$(grep -o '/[^ ]*pg_idem\.so' "/proc/$pid/maps" | sort -u)"
    [ "$got" = "$want" ] || { echo "the postmaster mapped '$got', not $want"; return 1; }
    want="$("$PG_CONFIG" --pkglibdir) $("$PG_CONFIG" --sharedir)"
    got="$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT string_agg(setting, ' ' ORDER BY name) FROM pg_config WHERE name IN ('PKGLIBDIR', 'SHAREDIR')")"
    [ "$got" = "$want" ] || { echo "server's PKGLIBDIR SHAREDIR: $got, not $want"; return 1; }
    got="$(psql -X -q -At -v ON_ERROR_STOP=1 -c "CREATE EXTENSION pg_idem" \
        -c "SELECT extversion || ' ' || idem_version() FROM pg_extension WHERE extname = 'pg_idem'")"
    [ "$got" = "$version $version" ] || { echo "extversion and idem_version(): '$got'"; return 1; }
    got="$(psql -X -At -v ON_ERROR_STOP=1 -c "SELECT outcome FROM idem_claim('t', 'k', 'h')")"
    [ "$got" = claimed ] || { echo "idem_claim: $got"; return 1; }
}
