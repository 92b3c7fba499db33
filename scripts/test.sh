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
#                  key_store, maintenance;
#                  full: all of tests/Cargo.toml's, the Citus cluster suite included: it runs
#                  where Citus is installed (15, from ../shared/citus when present) and
#                  skips itself with a message elsewhere)
#   golden         messages, declarations, usage        tests/pg_regress/run.sh (full only)
#   isolation      deterministic interleavings          tests/isolation/run.sh (full only)
#   examples       the Python and Node.js examples       examples/run.sh (full only)
# and, once every version is installed, pg_upgrade from 14 to 18 (tests/pg_upgrade.rs);
# on 15, the monitoring (monitoring/test.sh: Debian's postgres_exporter and promtool);
# and once: lint (cargo fmt --check, cargo clippy -D warnings, META.json's version), the
# benchmark runner in smoke mode (15), and the package: the .deb built, installed with apt-get
# on Debian's PostgreSQL 15, the demo run against it, the package removed again.
# Every step runs even when one before it failed; the last line counts the tests of all steps.
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
# kind has it; elsewhere the suite skips itself with a message unless Citus is installed
citus_installer="$root/../shared/citus/install.sh"
if [[ " ${versions[*]} " == *" 15 "* ]] && [ -x "$citus_installer" ]; then
    "$citus_installer" || exit 1
fi

log="$(mktemp -d)"
passed=0
failed=0
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
# counts counts as one test
step() {
    local name="$1" p f rc t0=$SECONDS
    shift
    echo
    echo "==== $name"
    "$@" 2>&1 | tee "$log/$name.out"
    rc=${PIPESTATUS[0]}
    read -r p f <<<"$(counts "$log/$name.out")"
    p=${p:-0}
    f=${f:-0}
    if [ "$p" = 0 ] && [ "$f" = 0 ]; then
        if [ "$rc" = 0 ]; then p=1; else f=1; fi
    elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        f=1 # failed without counting its failure
    fi
    passed=$((passed + p))
    failed=$((failed + f))
    [ "$rc" = 0 ] || failed_steps+=("$name")
    echo "---- $name: $p passed, $f failed (exit $rc, $((SECONDS - t0)) s)"
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
    meta="$(python3 -c 'import json; print(json.load(open("META.json"))["version"])')"
    cargo="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
    [ "$meta" = "$cargo" ] || { echo "META.json says $meta, Cargo.toml $cargo" >&2; rc=1; }
    return $rc
}

package() {
    local deb
    deb="$(scripts/package.sh deb)" || return 1
    apt-get install -y -qq "$deb" || return 1
    dpkg -L postgresql-15-pg-idem
    scripts/demo.sh --installed
    local rc=$?
    apt-get remove -y -qq postgresql-15-pg-idem
    return $rc
}

core_suites=(--test sessions --test security --test concurrency --test upgrade --test hardening --test tenant_grants --test key_store --test maintenance)

step lint lint
for major in "${versions[@]}"; do
    step "pg$major-in-server" in_server "$major"
    # cargo pgrx test left its test build installed; the client suites use the real one
    step "pg$major-install" with_pg "$major" scripts/install.sh --debug
    if is_full "$major"; then
        if ! with_pg "$major" bash -c '[ -f "$(pg_config --pkglibdir)/citus.so" ]'; then
            echo "note: the Citus cluster suite (tests/citus.rs) skips itself on PostgreSQL $major: Citus is not installed there"
        fi
        step "pg$major-clients" with_pg "$major" cargo test --no-fail-fast -p pg_idem_tests
        step "pg$major-golden" with_pg "$major" tests/pg_regress/run.sh
        step "pg$major-isolation" with_pg "$major" tests/isolation/run.sh
        step "pg$major-examples" with_pg "$major" examples/run.sh
    else
        step "pg$major-clients" with_pg "$major" cargo test --no-fail-fast -p pg_idem_tests "${core_suites[@]}"
    fi
    if [ "$major" = 15 ]; then
        # Prometheus: postgres_exporter with monitoring/'s queries as a pg_monitor role, the alerts
        step monitoring with_pg 15 monitoring/test.sh
        step bench-smoke with_pg 15 python3 bench/run.py --smoke --out "$root/target/bench-smoke"
    fi
done
if [[ " ${versions[*]} " == *" 15 "* ]]; then
    step package package
fi
# pg_upgrade from the oldest to the newest supported PostgreSQL, both installed by the loop above
if [[ " ${versions[*]} " == *" 14 "* && " ${versions[*]} " == *" 18 "* ]]; then
    step pg14-to-pg18-upgrade env PG_IDEM_UPGRADE_OLD_BINDIR="$(pg_bindir 14)" \
        PG_IDEM_UPGRADE_NEW_BINDIR="$(pg_bindir 18)" \
        cargo test -p pg_idem_tests --test pg_upgrade -- --nocapture
fi

echo
if [ "${#failed_steps[@]}" -gt 0 ]; then
    echo "failed steps: ${failed_steps[*]}"
fi
echo "total time: $((SECONDS - started)) s"
echo "$passed passed, $failed failed"
rm -rf "$log"
[ "${#failed_steps[@]}" = 0 ] && [ "$failed" = 0 ]
