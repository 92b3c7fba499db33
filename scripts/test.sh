#!/usr/bin/env bash
# The test command (the README's second command, what CI runs): installs what is missing
# (scripts/setup.sh), runs the tests, and ends with a table of every step's seconds, the ten
# slowest tests, the skipped tests and the line "N passed, N failed, N skipped".
#
#   scripts/test.sh              everything, on every supported PostgreSQL (about 40 minutes on
#                                2 cores from a fresh clone; CI stops at 90)
#   scripts/test.sh --quick      the inner loop (under 10 minutes once built): lint, the rules
#                                crate, PostgreSQL 15's in-server tests, and the core client
#                                suites natively and in the SQL edition
#   scripts/test.sh SUITE...     the named client suites (tests/Cargo.toml's [[test]] names) on
#                                PostgreSQL 15, natively and, for those it runs, in the SQL edition
#   scripts/test.sh --pg NN      everything on PostgreSQL NN alone
#
# docs/testing.md tells what each step proves, what this command installs and changes on the
# machine (Debian's PostgreSQL 15 gets its pg_idem files back as they were when it ends), and
# the longer tier that is not in it (bench/'s full runs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$(pwd)"
# shellcheck source=lib/versions.sh
source scripts/lib/versions.sh
# shellcheck source=lib/steps.sh
source scripts/lib/steps.sh
# shellcheck source=lib/pg15_guard.sh
source scripts/lib/pg15_guard.sh

usage() {
    echo "usage: scripts/test.sh [--quick | --pg NN | SUITE...]" >&2
    exit 2
}
mode=all
versions=("${SUPPORTED_PG[@]}")
full=(15 18)
named_suites=()
case "${1:-}" in
    --pg)
        [ -n "${2:-}" ] && [ -z "${3:-}" ] || usage
        versions=("$2")
        full=("$2")
        ;;
    --quick)
        [ -z "${2:-}" ] || usage
        mode=quick
        versions=(15)
        ;;
    -*) usage ;;
    "") ;;
    *)
        mode=suites
        versions=(15)
        named_suites=("$@")
        ;;
esac
is_full() { [[ " ${full[*]} " == *" $1 "* ]]; }
has_version() { [[ " ${versions[*]} " == *" $1 "* ]]; }

# the whole command's budget on 2 cores, setup included: the report says when a run went over
# (read by report_steps, scripts/lib/steps.sh)
if [ "$mode" = quick ]; then
    steps_budget=600
else
    steps_budget=2700
fi
export steps_budget
setup_args=("${versions[@]}")
# the release step's PGXN validator (tests/release/)
[ "$mode" = all ] && has_version 15 && setup_args=(--release "${versions[@]}")
time_setup setup scripts/setup.sh "${setup_args[@]}" || exit 1
# Citus (the cluster suite, tests/cluster/citus/, on 15): from ../shared/citus where this machine
# kind has it, and then required; elsewhere the suite is reported as skipped
citus_installer="$root/../shared/citus/install.sh"
if [ "$mode" = all ] && has_version 15 && [ -x "$citus_installer" ]; then
    time_setup citus-install "$citus_installer" || exit 1
fi
have_pg_tle=0
[ -x "$root/../shared/pg_tle/install.sh" ] && have_pg_tle=1

# required MAJOR: what a client test of that version must not skip for (PG_IDEM_REQUIRE, see
# skip_test in tests/harness/skips.rs): what setup.sh and the Citus installer put there
required() {
    local deps=faketime,prlimit,debug-build
    if [ "$1" = 15 ] && [ "$mode" = all ] && [ -x "$citus_installer" ]; then deps+=,citus; fi
    # pg_cron: setup.sh installs Debian's postgresql-15-cron (tests/sql_edition/sql_edition_purge.rs)
    if [ "$1" = 15 ]; then deps+=,pg_cron; fi
    # the SQL edition's managed-style servers (scripts/lib/managed_pg.sh builds pg_tle from it)
    if [ "$have_pg_tle" = 1 ]; then deps+=,pg_tle; fi
    echo "$deps"
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

# "${suites[@]}" ARGS...: client suites of pg_idem_tests, several test binaries at a time
suites=(python3 "$root/scripts/lib/run_suites.py" -p pg_idem_tests)

core_suites=(--test decisions --test sessions --test security --test concurrency --test upgrade --test hardening --test tenant_grants --test key_store --test maintenance --test table_changes --test tenant_boundary)
# the client suites that also run against the SQL edition (PG_IDEM_EDITION=sql); not the purge
# worker's, crash, failover (the fence clock), Citus, pg_upgrade and soak suites, nor the
# sql_edition* suites, which compare the editions themselves
sql_edition_suites=("${core_suites[@]}" --test consumers --test extras --test pooler --test dump_restore --test fence_tokens)
# through pg_tle the same SQL runs as in the plain install; where both run on one version, only
# the suites where the install itself shows (who owns what, what a dump holds, the key lock's
# secret) run through pg_tle
tle_install_suites=(--test decisions --test sessions --test security --test consumers --test key_store --test dump_restore)

# the pg_upgrade test runs in a step of its own (below) when both its versions are in the run;
# in the full client steps it could only skip
upgrade_step=0
[ "$mode" = all ] && has_version 14 && has_version 18 && upgrade_step=1
full_filter=()
[ "$upgrade_step" = 1 ] && full_filter=(-- --skip pg_upgrade_keeps_every_key_and_runs_no_purge_in_binary_upgrade_mode)

if has_version 15; then
    trap restore_pg15 EXIT
    # so that the EXIT trap runs on a signal too (after the command in the foreground ends)
    trap 'exit 130' INT
    trap 'exit 143' TERM
    save_pg15 || { echo "cannot save the pg_idem files of Debian's PostgreSQL 15" >&2; exit 1; }
fi

# build_and_install NN: PostgreSQL NN's in-server tests (cargo pgrx test installs its test
# build), then the real debug build installed for the client suites
build_and_install() {
    step "pg$1-in-server" in_server "$1"
    step "pg$1-install" with_pg "$1" scripts/install.sh --debug
}

# the SQL edition's steps of a version: plainly and through pg_tle. On the last full version
# (18) with pg_tle, only through pg_tle: the same SQL as the plain install, and pg_tle's
# install on top; the plain install of every suite runs on 15. Without pg_tle, plainly only.
sql_edition_steps() {
    local major="$1" last_full="${full[${#full[@]}-1]}"
    if [ "$have_pg_tle" = 0 ]; then
        step "pg$major-sql-edition" with_pg "$major" env PG_IDEM_EDITION=sql "${suites[@]}" "${sql_edition_suites[@]}"
        step "pg$major-sql-edition-tle" skip_step "../shared/pg_tle (pg_tle's source) is missing: no managed-style server"
    elif [ "$major" = "$last_full" ] && [ "${#full[@]}" -gt 1 ]; then
        step "pg$major-sql-edition-tle" with_pg "$major" env PG_IDEM_EDITION=sql-tle "${suites[@]}" "${sql_edition_suites[@]}"
    else
        step "pg$major-sql-edition" with_pg "$major" env PG_IDEM_EDITION=sql "${suites[@]}" "${sql_edition_suites[@]}"
        local tle=("${tle_install_suites[@]}")
        [ "${#full[@]}" -gt 1 ] || tle=("${sql_edition_suites[@]}")
        step "pg$major-sql-edition-tle" with_pg "$major" env PG_IDEM_EDITION=sql-tle "${suites[@]}" "${tle[@]}"
    fi
}

# on 14, 16 and 17 (not in `full`): the SQL edition's plain install, on the PostgreSQL under
# test itself (PG_IDEM_SQL_SERVER=under-test: pg_tle, and with it the managed-style copy that
# keeps the native files out of reach, is built for 15 and 18 alone; 15 proves that no suite
# uses them). What a version changes for SQL and PL/pgSQL is whether the server takes the
# install and each statement of a body when it first runs (so every function must run), its
# roles and privileges, catalogs and maintenance commands: the suites that call the functions
# (consumers and extras for the batches, messages, watermarks, checkpoints and streams the core
# suites do not call) and attack their boundaries, without the tests that drive load or limits
# for seconds (the concurrency and maintenance workloads, one stream under concurrent calls, a
# parallel plan the SQL edition's PARALLEL UNSAFE function never gets, huge and deep inputs),
# key_store (amcheck, logical decoding: the server's own machinery) and upgrade (native only
# here); those run on 15 and 18
sql_edition_version_suites=(--test decisions --test sessions --test security --test hardening --test tenant_grants --test table_changes --test tenant_boundary --test consumers --test extras
    -- --skip the_tenant_check_answers_in_a_parallel_query --skip huge_inputs_stay_within_postgresql_memory
    --skip deep_json_fails_cleanly_instead_of_crashing_the_server --skip concurrent_calls_on_one_stream_serialise)
sql_edition_version_step() {
    step "pg$1-sql-edition" with_pg "$1" env PG_IDEM_EDITION=sql PG_IDEM_SQL_SERVER=under-test "${suites[@]}" "${sql_edition_version_suites[@]}"
}

full_version() {
    local major="$1"
    if ! with_pg "$major" bash -c '[ -f "$(pg_config --pkglibdir)/citus.so" ]'; then
        echo "note: Citus is not installed into PostgreSQL $major: the cluster suite (tests/cluster/citus/) is reported as skipped there"
    fi
    step "pg$major-clients" with_pg "$major" "${suites[@]}" "${full_filter[@]}"
    sql_edition_steps "$major"
    step "pg$major-golden" with_pg "$major" tests/pg_regress/run.sh
    step "pg$major-isolation" with_pg "$major" tests/isolation/run.sh
    step "pg$major-isolation-spi" with_pg "$major" tests/isolation/run.sh --path spi
    step "pg$major-isolation-sql" with_pg "$major" tests/isolation/run.sh --path sql
    step "pg$major-examples" with_pg "$major" examples/run.sh
    step "pg$major-examples-pooler" with_pg "$major" examples/run.sh --pooler
}

# on 15 only: the documentation, the monitoring, the HTTP packages, the benchmarks in smoke mode
pg15_only() {
    # Prometheus: postgres_exporter with monitoring/'s queries as a pg_monitor role, the alerts;
    # it mostly waits for scrapes and counters, so beside the next two steps
    step_bg monitoring with_pg 15 monitoring/test.sh
    # every sql and sh block of README.md and docs/, run against pg_idem as just installed
    step docs-snippets with_pg 15 python3 scripts/doc_snippets.py
    # the HTTP client packages: their dependencies (pip, npm, cargo), their unit tests, and the
    # HTTP conformance suite against every reference app (native, SQL edition, PgBouncer)
    step clients-setup clients/setup.sh
    join_steps
    step pg15-http with_pg 15 clients/test.sh
    # the release (scripts/release.sh), every artifact checked from itself alone in a clean place
    # (tests/release/run.sh): the .deb and the tarballs laid into copies of their PostgreSQL with
    # the demo, the SQL edition's files by a non-superuser, the PGXN zip, the HTTP packages with
    # their quick starts. Its release builds (fat LTO, one codegen unit: minutes of CPU each) run
    # beside the benchmarks' smoke runs, which last as long as their fixed durations whatever
    # the load, and run no cargo
    step_bg release tests/release/run.sh
    bench_smoke
    join_steps
}

# the benchmark runners and bench/'s diagnostics in smoke mode: that they still run, not their
# numbers (bench/README.md has the full runs)
bench_smoke() {
    local out="$root/target/bench-smoke"
    step bench-http-smoke with_pg 15 python3 bench/runners/http_middleware.py --smoke --out "$out/http"
    step bench-smoke with_pg 15 python3 bench/runners/run.py --smoke --out "$out/matrix"
    step bench-scale-smoke with_pg 15 python3 bench/runners/scale.py --smoke --pg 15 --out "$out/scale"
    step bench-soak-smoke with_pg 15 python3 bench/runners/soak.py --smoke --pg 15 --out "$out/soak"
    step bench-sql-edition-smoke with_pg 15 python3 bench/runners/sql_edition.py --smoke --out "$out/sql-edition"
    # perf and valgrind: Debian's linux-perf and valgrind, skipped where missing
    if command -v perf >/dev/null; then
        step bench-perf-smoke with_pg 15 bash bench/diagnostics/perf.sh 1 1 consume
        step bench-sql-edition-profile-smoke with_pg 15 python3 bench/diagnostics/sql_edition_profile.py --smoke --perf --out "$out/sql-edition-profile"
    else
        step bench-perf-smoke skip_step "perf is not installed (linux-perf)"
        step bench-sql-edition-profile-smoke with_pg 15 python3 bench/diagnostics/sql_edition_profile.py --smoke --out "$out/sql-edition-profile"
    fi
    if command -v valgrind >/dev/null; then
        step bench-sql-edition-instructions-smoke with_pg 15 python3 bench/diagnostics/sql_edition_instructions.py --smoke
        # the native edition's regression guard: its server instructions per transaction (fresh,
        # consume, replay) on the debug build installed above, within 2% of the guard file's
        step bench-native-instructions-guard with_pg 15 python3 bench/diagnostics/sql_edition_instructions.py \
            --guard bench/report/native-instructions-pg15-debug.json
    else
        step bench-sql-edition-instructions-smoke skip_step "valgrind is not installed"
        step bench-native-instructions-guard skip_step "valgrind is not installed"
    fi
    step bench-breakdown-smoke with_pg 15 bash bench/diagnostics/breakdown.sh 1 replay consume
    step bench-statement-times-smoke with_pg 15 python3 bench/diagnostics/statement_times.py --smoke
    # what the calls add to a transaction of five business statements, both editions
    step bench-call-cost-smoke with_pg 15 python3 bench/runners/call_cost.py --smoke --native --out "$out/call-cost"
    step bench-tenant-grants-smoke with_pg 15 bash bench/runners/tenant_grants.sh 1 1
    if with_pg 15 bash -c '[ -f "$(pg_config --pkglibdir)/citus.so" ]'; then
        step bench-citus-smoke with_pg 15 bash bench/runners/citus.sh 1 1 1
    else
        step bench-citus-smoke skip_step "Citus is not installed into PostgreSQL 15"
    fi
}

# the named suites on 15: natively, then in the SQL edition those it runs there
named_suites_steps() {
    local name native=() sql=()
    for name in "${named_suites[@]}"; do
        grep -qE "^name = \"$name\"$" tests/Cargo.toml || { echo "no suite named $name (tests/Cargo.toml)" >&2; exit 2; }
        native+=(--test "$name")
        if [[ " ${sql_edition_suites[*]} " == *" $name "* ]]; then
            sql+=(--test "$name")
        else
            echo "note: $name runs natively only (the test command does not run it in the SQL edition)"
        fi
    done
    step pg15-install with_pg 15 scripts/install.sh --debug
    step pg15-suites with_pg 15 "${suites[@]}" "${native[@]}"
    [ "${#sql[@]}" = 0 ] || step pg15-suites-sql-edition with_pg 15 env PG_IDEM_EDITION=sql "${suites[@]}" "${sql[@]}"
}

export PG_IDEM_REQUIRE
case "$mode" in
    quick)
        PG_IDEM_REQUIRE="$(required 15)"
        step lint scripts/lint.sh
        step rules cargo test -p pg_idem_rules
        build_and_install 15
        step pg15-core with_pg 15 "${suites[@]}" "${core_suites[@]}"
        step pg15-core-sql-edition with_pg 15 env PG_IDEM_EDITION=sql "${suites[@]}" "${core_suites[@]}"
        ;;
    suites)
        PG_IDEM_REQUIRE="$(required 15)"
        named_suites_steps
        ;;
    all)
        step lint scripts/lint.sh
        # the decisions without PostgreSQL (rules/): plain unit tests, no server
        step rules cargo test -p pg_idem_rules
        for major in "${versions[@]}"; do
            PG_IDEM_REQUIRE="$(required "$major")"
            build_and_install "$major"
            if is_full "$major"; then
                full_version "$major"
            else
                step "pg$major-clients" with_pg "$major" "${suites[@]}" "${core_suites[@]}"
                sql_edition_version_step "$major"
            fi
            [ "$major" = 15 ] && pg15_only
        done
        # pg_upgrade from the oldest to the newest supported PostgreSQL, both installed above
        if [ "$upgrade_step" = 1 ]; then
            step pg14-to-pg18-upgrade env PG_IDEM_REQUIRE="$(required 18),pg_upgrade" \
                PG_IDEM_UPGRADE_OLD_BINDIR="$(pg_bindir 14)" \
                PG_IDEM_UPGRADE_NEW_BINDIR="$(pg_bindir 18)" \
                "${suites[@]}" --test pg_upgrade -- --nocapture
        fi
        ;;
esac

if has_version 15; then
    restore_pg15 || { steps_failed_steps+=(restore-pg15); steps_failed=$((steps_failed + 1)); }
fi
report_steps
