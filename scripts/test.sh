#!/usr/bin/env bash
# Runs every test of pg_idem on every supported PostgreSQL, after installing what is missing
# (scripts/setup.sh). What CI runs (.ci/run).
#
#   scripts/test.sh            every version: the full suite on 15 and 18; on 14, 16 and 17 the
#                              in-server tests and the core client suites
#   scripts/test.sh --pg 17    the full suite on one version only (a quick local loop)
#
# The steps, per version:
#   in-server      unit tests and #[pg_test]s            cargo pgrx test pgNN (as the postgres user)
#   clients        client suites against real servers   cargo test -p pg_idem_tests
#                  (core: sessions, security, concurrency, upgrade, hardening, tenant_grants,
#                  key_store, maintenance, table_changes, tenant_boundary;
#                  full: all of tests/Cargo.toml's, the Citus cluster suite included: it runs
#                  where Citus is installed (15, from ../shared/citus when present) and is
#                  reported as skipped elsewhere; and the pooler suite (tests/pooler.rs:
#                  its own PgBouncer in transaction mode, Debian's pgbouncer from setup.sh))
#   sql-edition    the client suites again, against the SQL edition (full only):
#                  PG_IDEM_EDITION=sql makes the harness install scripts/sql_edition.py's plain
#                  file instead of preloading pg_idem and CREATE EXTENSION, as a DBA that is no
#                  superuser (the suites connect as it, as in sql-edition-tle), on the managed-style
#                  copy of PostgreSQL NN (none of pg_idem's files; on NN itself where
#                  ../shared/pg_tle is missing); the core suites,
#                  consumers, extras, pooler (PgBouncer in transaction mode), dump_restore and
#                  fence_tokens; a test of what only the native engine has (the engine's heap
#                  writes, shared-memory counters, the fence clock, GUCs, the library's updates)
#                  calls native_only and is counted as skipped (about 1.5 minutes)
#   sql-edition-tle  the same suites again, as on RDS, Aurora and Supabase (full only):
#                  PG_IDEM_EDITION=sql-tle runs every server from the managed-style copy of
#                  PostgreSQL NN (scripts/lib/managed_pg.sh: pg_tle built from ../shared/pg_tle
#                  and preloaded, none of pg_idem's files) and installs the SQL edition through
#                  pg_tle, registered and created by a role that is not a superuser, as which
#                  the suites connect: after the service's setup no superuser is used but for
#                  amcheck and what only a superuser may do (about 1.5 minutes); reported as
#                  one skipped test where ../shared/pg_tle is missing
#   golden         messages, declarations, usage        tests/pg_regress/run.sh (full only)
#   isolation      deterministic interleavings          tests/isolation/run.sh (full only), on
#                  the engine path, then again on the native SPI path (--path spi: a row trigger
#                  on idem.keys) and in the SQL edition (--path sql), each on a server of its own
#   examples       the Python and Node.js examples       examples/run.sh (full only), and again
#                  through PgBouncer in transaction mode examples/run.sh --pooler (full only)
# and, once every version is installed, pg_upgrade from 14 to 18 (tests/pg_upgrade.rs);
# on 15, the documentation's snippets (scripts/doc_snippets.py: every sql and sh block of
# README.md and docs/ against throwaway servers of both editions, their shown output, and the
# pages' links; docs/snippets.md), the monitoring (monitoring/test.sh: Debian's postgres_exporter
# and promtool), and the
# HTTP client packages (clients/setup.sh installs their pip, npm and cargo dependencies;
# clients/test.sh runs their unit tests and the HTTP conformance suite against every reference
# app with the native edition, the SQL edition and through PgBouncer; bench/http_middleware.py
# in smoke mode);
# and once: lint (cargo fmt --check, cargo clippy -D warnings, META.json's version, the
# bench/report/ paths the docs cite), the benchmark runners and bench/'s diagnostics in smoke
# mode (15), and the package (tests/package/run.sh: the .deb built, checked unpacked, and the
# demo run against a copy of Debian's PostgreSQL 15 with the package's files in it; nothing is
# installed).
# Every step runs even when one before it failed; the last line counts the tests of all steps:
# "N passed, N failed, N skipped".
#
# Skipped tests. A client test that cannot run because something is missing on this machine
# (Citus, faketime, prlimit, the two bin directories of the pg_upgrade test), or that tests what
# only the native edition has in a sql-edition step (native_only), calls the harness's
# skip_test (tests/harness/lib.rs): cargo counts it as passed, so the harness also writes a line
# "SKIPPED: suite::test: reason" into the file PG_IDEM_SKIP_LOG names, which step() sets per
# step; those lines are counted as skipped, taken off the step's passed and listed before the
# last line. What this command installs itself is required instead (PG_IDEM_REQUIRE): faketime
# (setup.sh), prlimit (util-linux), a debug build of pg_idem (the fence slots of
# tests/fence_tokens.rs) and, on 15 where ../shared/citus exists, Citus; a test
# missing one of them fails.
#
# The machine. setup.sh installs what is missing (Debian packages, PostgreSQL 14/16/17/18 into
# /var/cache/pg_idem, cargo-pgrx), ../shared/citus/install.sh installs Citus into PostgreSQL 15,
# and every pgNN-in-server and pgNN-install step installs the debug build of pg_idem into
# PostgreSQL NN, Debian's PostgreSQL 15 included. Those pg_idem files of Debian's PostgreSQL 15
# (pg_idem.so, pg_idem.control, pg_idem--*.sql) are saved before the first step and put back as
# they were when the command ends, however it ends (removed if there were none); the builds in
# /var/cache/pg_idem's trees stay.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh

versions=("${SUPPORTED_PG[@]}")
full=(15 18)
case "${1:-}" in
    --pg)
        [ -n "${2:-}" ] || { echo "usage: scripts/test.sh [--pg NN]" >&2; exit 2; }
        versions=("$2")
        full=("$2")
        ;;
    "") ;;
    *) echo "usage: scripts/test.sh [--pg NN]" >&2; exit 2 ;;
esac
is_full() { [[ " ${full[*]} " == *" $1 "* ]]; }

scripts/setup.sh "${versions[@]}" || exit 1
# Citus (for the cluster suite, tests/citus.rs, on 15): from ../shared/citus where this machine
# kind has it, and then required; elsewhere the suite is reported as skipped unless Citus is
# installed
citus_installer="$root/../shared/citus/install.sh"
if [[ " ${versions[*]} " == *" 15 "* ]] && [ -x "$citus_installer" ]; then
    "$citus_installer" || exit 1
fi

# required MAJOR: what a client test of that version must not skip for (PG_IDEM_REQUIRE, see
# skip_test in tests/harness/lib.rs): what setup.sh and the Citus installer put there
required() {
    local deps=faketime,prlimit,debug-build
    if [ "$1" = 15 ] && [ -x "$citus_installer" ]; then deps+=,citus; fi
    # pg_cron: setup.sh installs Debian's postgresql-15-cron (tests/sql_edition_purge.rs)
    if [ "$1" = 15 ]; then deps+=,pg_cron; fi
    # the SQL edition's managed-style servers (scripts/lib/managed_pg.sh builds pg_tle from it)
    if [ -x "$root/../shared/pg_tle/install.sh" ]; then deps+=,pg_tle; fi
    echo "$deps"
}

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Debian's PostgreSQL 15 is the system's own: cargo pgrx test and scripts/install.sh below write
# pg_idem's files into its directories. save_pg15 keeps what is there now (a package's files, a
# build of the user's, or nothing); restore_pg15 puts exactly that back, by rename as
# scripts/install.sh does (a running server keeps the library it has mapped), and removes what
# was not there.
pg15_dirs=(/usr/lib/postgresql/15/lib /usr/share/postgresql/15/extension)
pg15_saved=""
pg15_files() { find "$1" -maxdepth 1 -type f \( -name pg_idem.so -o -name pg_idem.control -o -name 'pg_idem--*.sql' \) | sort; }
# pg15_manifest ROOT: checksum, mode, owner and name of each such file under ROOT (the saved
# copy, or "" for the system)
pg15_manifest() {
    local dir file
    for dir in "${pg15_dirs[@]}"; do
        [ -d "$1$dir" ] || continue
        for file in $(pg15_files "$1$dir"); do
            echo "$(sha256sum <"$file" | cut -d' ' -f1) $(stat -c '%a %U:%G' "$file") ${file#"$1"}"
        done
    done
}
save_pg15() {
    local dir file
    pg15_saved="$(mktemp -d /tmp/pg_idem_pg15_saved.XXXXXX)" || return 1
    for dir in "${pg15_dirs[@]}"; do
        mkdir -p "$pg15_saved$dir" || return 1
        [ -d "$dir" ] || continue
        for file in $(pg15_files "$dir"); do
            cp -a "$file" "$pg15_saved$file" || return 1
        done
    done
    pg15_manifest "" >"$pg15_saved.manifest"
    echo "saved the pg_idem files of Debian's PostgreSQL 15 ($(wc -l <"$pg15_saved.manifest")), to put back at the end"
}
restore_pg15() {
    [ -n "$pg15_saved" ] || return 0
    local dir file saved rc=0
    for dir in "${pg15_dirs[@]}"; do
        [ -d "$dir" ] || continue
        for file in $(pg15_files "$dir"); do
            [ -f "$pg15_saved$file" ] || as_root rm -f "$file" || rc=1
        done
        for saved in $(pg15_files "$pg15_saved$dir"); do
            file="${saved#"$pg15_saved"}"
            if ! cmp -s "$saved" "$file"; then
                { as_root cp -a "$saved" "$file.restore.$$" && as_root mv -f "$file.restore.$$" "$file"; } || rc=1
            fi
        done
    done
    if [ "$rc" = 0 ] && diff "$pg15_saved.manifest" <(pg15_manifest ""); then
        echo "Debian's PostgreSQL 15: pg_idem's files are as they were before the test command ($(wc -l <"$pg15_saved.manifest"))"
        rm -rf "$pg15_saved" "$pg15_saved.manifest"
    else
        echo "Debian's PostgreSQL 15: pg_idem's files could not be put back as they were; the saved ones are in $pg15_saved" >&2
        rc=1
    fi
    pg15_saved=""
    return $rc
}

log="$(mktemp -d)"
passed=0
failed=0
skipped=0
skipped_tests=()
failed_steps=()
started=$SECONDS

# counts OUTPUT: "passed failed" of a step's output: the sum of cargo's "test result:" lines, or
# else the last "N passed, N failed" line our runners print
counts() {
    if grep -aq '^test result:' "$1"; then
        grep -a '^test result:' "$1" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' |
            awk '{ p += $1; f += $2 } END { print p + 0, f + 0 }'
    else
        grep -aE '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1 | sed -E 's/^([0-9]+) passed, ([0-9]+) failed.*/\1 \2/'
    fi
}

# step NAME CMD...: runs a step, shows its output and adds up its counts; a step that prints no
# counts counts as one test. The tests that recorded a skip in PG_IDEM_SKIP_LOG (cargo counted
# them as passed) are counted as skipped instead.
step() {
    local name="$1" p f s=0 rc t0=$SECONDS line
    shift
    echo
    echo "==== $name"
    export PG_IDEM_SKIP_LOG="$log/$name.skipped"
    "$@" 2>&1 | tee "$log/$name.out"
    rc=${PIPESTATUS[0]}
    unset PG_IDEM_SKIP_LOG
    read -r p f <<<"$(counts "$log/$name.out")"
    p=${p:-0}
    f=${f:-0}
    if [ "$p" = 0 ] && [ "$f" = 0 ]; then
        if [ "$rc" = 0 ]; then p=1; else f=1; fi
    elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        f=1 # failed without counting its failure
    fi
    if [ -s "$log/$name.skipped" ]; then
        while IFS= read -r line; do
            skipped_tests+=("$name: ${line#SKIPPED: }")
            s=$((s + 1))
        done < <(grep -a '^SKIPPED: ' "$log/$name.skipped")
        p=$((p > s ? p - s : 0))
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    [ "$rc" = 0 ] || failed_steps+=("$name")
    echo "---- $name: $p passed, $f failed, $s skipped (exit $rc, $((SECONDS - t0)) s)"
}

# skip_step REASON: a step that cannot run on this machine, counted as one skipped test
skip_step() {
    echo "SKIPPED: the whole step: $1" | tee -a "$PG_IDEM_SKIP_LOG"
}

# with_pg NN CMD...: CMD with PostgreSQL NN's pg_config and binaries first in PATH
with_pg() {
    local major="$1"
    shift
    (use_pg "$major" && "$@")
}

in_server() {
    local pgdata rc
    pgdata="$(mktemp -d /tmp/pg_idem_pgrx.XXXXXX)"
    chown postgres "$pgdata" 2>/dev/null || true
    CARGO_PGRX_TEST_RUNAS=postgres CARGO_PGRX_TEST_PGDATA="$pgdata" cargo pgrx test "pg$1"
    rc=$?
    rm -rf "$pgdata"
    return $rc
}

lint() {
    local rc=0 meta cargo
    cargo fmt --all --check || rc=1
    cargo clippy --all-targets -p pg_idem_tests -- -D warnings || rc=1
    cargo clippy --lib -p pg_idem -- -D warnings || rc=1
    cargo clippy --all-targets -p pg_idem_rules -- -D warnings || rc=1
    meta="$(python3 -c 'import json; print(json.load(open("META.json"))["version"])')"
    cargo="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
    [ "$meta" = "$cargo" ] || { echo "META.json says $meta, Cargo.toml $cargo" >&2; rc=1; }
    # every suite file tests/*.rs is a [[test]] of tests/Cargo.toml and every [[test]] a file
    # (Cargo discovers suites by itself only under tests/tests/): a new suite nobody listed
    # would never run
    local listed on_disk
    listed="$(sed -nE 's/^path = "([^"/]+[.]rs)"$/\1/p' tests/Cargo.toml | sort)"
    on_disk="$(cd tests && ls -- *.rs | sort)"
    if [ "$listed" != "$on_disk" ]; then
        echo "tests/Cargo.toml's [[test]] paths (<) differ from the files tests/*.rs (>):" >&2
        diff <(echo "$listed") <(echo "$on_disk") >&2
        rc=1
    fi
    # every benchmark report the docs cite is there: bench/report/... in README.md,
    # CONTRIBUTING.md and bench/README.md, and bench/README.md's links to report/...
    local cited
    for cited in $( { grep -ohE 'bench/report/[A-Za-z0-9_./-]*' README.md CONTRIBUTING.md bench/README.md
        grep -ohE '\(report/[^) ]*\)|`report/[^` ]*`' bench/README.md | tr -d '()`' | sed 's|^|bench/|'
    } | sed -E 's/[.,:;]+$//' | sort -u); do
        [ -e "$cited" ] || { echo "the docs cite $cited, which does not exist" >&2; rc=1; }
    done
    return $rc
}

core_suites=(--test decisions --test sessions --test security --test concurrency --test upgrade --test hardening --test tenant_grants --test key_store --test maintenance --test table_changes --test tenant_boundary)
# the client suites that also run against the SQL edition (PG_IDEM_EDITION=sql); not (yet) the
# purge worker's, crash, failover (the fence clock), Citus, pg_upgrade and soak suites, nor the
# sql_edition* suites, which compare the editions themselves
sql_edition_suites=("${core_suites[@]}" --test consumers --test extras --test pooler --test dump_restore --test fence_tokens)

# the pg_upgrade test runs in a step of its own (below) when both its versions are in the run;
# in the full client steps it could only skip
upgrade_step=0
[[ " ${versions[*]} " == *" 14 "* && " ${versions[*]} " == *" 18 "* ]] && upgrade_step=1
full_filter=()
[ "$upgrade_step" = 1 ] && full_filter=(-- --skip pg_upgrade_keeps_every_key_and_runs_no_purge_in_binary_upgrade_mode)

if [[ " ${versions[*]} " == *" 15 "* ]]; then
    trap restore_pg15 EXIT
    # so that the EXIT trap runs on a signal too (after the command in the foreground ends)
    trap 'exit 130' INT
    trap 'exit 143' TERM
    save_pg15 || { echo "cannot save the pg_idem files of Debian's PostgreSQL 15" >&2; exit 1; }
fi

step lint lint
# the decisions without PostgreSQL (rules/): plain unit tests, no server
step rules cargo test -p pg_idem_rules
for major in "${versions[@]}"; do
    export PG_IDEM_REQUIRE="$(required "$major")"
    step "pg$major-in-server" in_server "$major"
    # cargo pgrx test left its test build installed; the client suites use the real one
    step "pg$major-install" with_pg "$major" scripts/install.sh --debug
    if is_full "$major"; then
        if ! with_pg "$major" bash -c '[ -f "$(pg_config --pkglibdir)/citus.so" ]'; then
            echo "note: Citus is not installed into PostgreSQL $major: the cluster suite (tests/citus.rs) is reported as skipped there"
        fi
        step "pg$major-clients" with_pg "$major" cargo test --no-fail-fast -p pg_idem_tests "${full_filter[@]}"
        step "pg$major-sql-edition" with_pg "$major" env PG_IDEM_EDITION=sql \
            cargo test --no-fail-fast -p pg_idem_tests "${sql_edition_suites[@]}"
        if [ -x "$root/../shared/pg_tle/install.sh" ]; then
            # through pg_tle the same SQL runs as in the plain install: every suite on the newest
            # full version, on the others those where the install itself shows (who owns what,
            # what a dump holds, the key lock's secret)
            tle_suites=("${sql_edition_suites[@]}")
            [ "$major" = "${full[${#full[@]}-1]}" ] ||
                tle_suites=(--test decisions --test sessions --test security --test consumers --test key_store --test dump_restore)
            step "pg$major-sql-edition-tle" with_pg "$major" env PG_IDEM_EDITION=sql-tle \
                cargo test --no-fail-fast -p pg_idem_tests "${tle_suites[@]}"
        else
            step "pg$major-sql-edition-tle" skip_step "../shared/pg_tle (pg_tle's source) is missing: no managed-style server"
        fi
        step "pg$major-golden" with_pg "$major" tests/pg_regress/run.sh
        step "pg$major-isolation" with_pg "$major" tests/isolation/run.sh
        step "pg$major-isolation-spi" with_pg "$major" tests/isolation/run.sh --path spi
        step "pg$major-isolation-sql" with_pg "$major" tests/isolation/run.sh --path sql
        step "pg$major-examples" with_pg "$major" examples/run.sh
        step "pg$major-examples-pooler" with_pg "$major" examples/run.sh --pooler
    else
        step "pg$major-clients" with_pg "$major" cargo test --no-fail-fast -p pg_idem_tests "${core_suites[@]}"
    fi
    if [ "$major" = 15 ]; then
        # every sql and sh block of README.md and docs/, run against pg_idem as just installed
        step docs-snippets with_pg 15 python3 scripts/doc_snippets.py
        # Prometheus: postgres_exporter with monitoring/'s queries as a pg_monitor role, the alerts
        step monitoring with_pg 15 monitoring/test.sh
        # the HTTP client packages (clients/): their dependencies (pip, npm, cargo), their unit
        # tests, and the HTTP conformance suite against every reference app (native, SQL edition,
        # PgBouncer in transaction mode)
        step clients-setup clients/setup.sh
        step pg15-http with_pg 15 clients/test.sh
        step bench-http-smoke with_pg 15 python3 bench/http_middleware.py --smoke --out "$root/target/bench-http-smoke"
        step bench-smoke with_pg 15 python3 bench/run.py --smoke --out "$root/target/bench-smoke"
        step bench-scale-smoke with_pg 15 python3 bench/scale.py --smoke --pg 15 --out "$root/target/bench-scale-smoke"
        step bench-soak-smoke with_pg 15 python3 bench/soak.py --smoke --pg 15 --out "$root/target/bench-soak-smoke"
        step bench-sql-edition-smoke with_pg 15 python3 bench/sql_edition.py --smoke --out "$root/target/bench-sql-edition-smoke"
        # the diagnostics of bench/README.md, a few seconds each: that they still run, not their
        # numbers (perf and valgrind: Debian's linux-perf and valgrind, skipped where missing)
        if command -v perf >/dev/null; then
            step bench-perf-smoke with_pg 15 bash bench/perf.sh 1 1 consume
            step bench-sql-edition-profile-smoke with_pg 15 python3 bench/sql_edition_profile.py --smoke --perf --out "$root/target/bench-sql-edition-profile-smoke"
        else
            step bench-perf-smoke skip_step "perf is not installed (linux-perf)"
            step bench-sql-edition-profile-smoke with_pg 15 python3 bench/sql_edition_profile.py --smoke --out "$root/target/bench-sql-edition-profile-smoke"
        fi
        if command -v valgrind >/dev/null; then
            step bench-sql-edition-instructions-smoke with_pg 15 python3 bench/sql_edition_instructions.py --smoke
            # the native edition's regression guard: its server instructions per transaction
            # (fresh, consume, replay) on the debug build installed above, within 2% of the
            # counts in the guard file (bench/README.md, "The native edition's guard")
            step bench-native-instructions-guard with_pg 15 python3 bench/sql_edition_instructions.py \
                --guard bench/report/native-instructions-pg15-debug.json
        else
            step bench-sql-edition-instructions-smoke skip_step "valgrind is not installed"
            step bench-native-instructions-guard skip_step "valgrind is not installed"
        fi
        step bench-breakdown-smoke with_pg 15 bash bench/breakdown.sh 1 replay consume
        step bench-statement-times-smoke with_pg 15 python3 bench/statement_times.py --smoke
        # what the calls add to a transaction of five business statements, both editions: that it runs
        step bench-call-cost-smoke with_pg 15 python3 bench/call_cost.py --smoke --native --out "$root/target/bench-call-cost-smoke"
        step bench-tenant-grants-smoke with_pg 15 bash bench/tenant_grants.sh 1 1
        if with_pg 15 bash -c '[ -f "$(pg_config --pkglibdir)/citus.so" ]'; then
            step bench-citus-smoke with_pg 15 bash bench/citus/run.sh 1 1 1
        else
            step bench-citus-smoke skip_step "Citus is not installed into PostgreSQL 15"
        fi
    fi
done
if [[ " ${versions[*]} " == *" 15 "* ]]; then
    # nothing installed: checked unpacked, the demo against a copy of Debian's PostgreSQL 15
    step package tests/package/run.sh
fi
# pg_upgrade from the oldest to the newest supported PostgreSQL, both installed by the loop above
if [ "$upgrade_step" = 1 ]; then
    step pg14-to-pg18-upgrade env PG_IDEM_REQUIRE="$(required 18),pg_upgrade" \
        PG_IDEM_UPGRADE_OLD_BINDIR="$(pg_bindir 14)" \
        PG_IDEM_UPGRADE_NEW_BINDIR="$(pg_bindir 18)" \
        cargo test -p pg_idem_tests --test pg_upgrade -- --nocapture
fi

echo
restore_pg15 || { failed_steps+=(restore-pg15); failed=$((failed + 1)); }
if [ "${#failed_steps[@]}" -gt 0 ]; then
    echo "failed steps: ${failed_steps[*]}"
fi
if [ "$skipped" -gt 0 ]; then
    echo "skipped tests (step: suite::test: why):"
    printf '  %s\n' "${skipped_tests[@]}"
fi
echo "total time: $((SECONDS - started)) s"
echo "$passed passed, $failed failed, $skipped skipped"
rm -rf "$log"
[ "${#failed_steps[@]}" = 0 ] && [ "$failed" = 0 ]
