#!/usr/bin/env bash
# Runs every test of pg_idem, after installing what is missing (scripts/setup.sh):
#   1. unit tests and in-server #[pg_test]s        cargo pgrx test (as the postgres user)
#   2. client suites against real servers          cargo test -p pg_idem_tests
#      (sessions, security, purge worker, concurrency invariants, crashes, dump/restore, extras)
#   3. deterministic interleavings                 tests/isolation/run.sh (pg_isolation_regress)
#   4. the Python and Node.js examples             examples/run.sh
#   5. the benchmark runner in smoke mode          bench/run.py --smoke
# Every step runs even when one before it failed; the last line counts the tests of all steps.
set -uo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

scripts/setup.sh || exit 1

log="$(mktemp -d)"
passed=0
failed=0
failed_steps=()

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
    local name="$1" p f rc
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
    echo "---- $name: $p passed, $f failed (exit $rc)"
}

pgdata="$(mktemp -d /tmp/pg_idem_pgrx.XXXXXX)"
chown postgres "$pgdata" 2>/dev/null || true
step unit-and-pg_test env CARGO_PGRX_TEST_RUNAS=postgres CARGO_PGRX_TEST_PGDATA="$pgdata" \
    cargo pgrx test pg15
rm -rf "$pgdata"

# cargo pgrx test left its test build installed; the client suites use the real one
step install scripts/install.sh --debug
step client-suites cargo test --no-fail-fast -p pg_idem_tests
step isolation tests/isolation/run.sh
step examples examples/run.sh
step bench-smoke python3 bench/run.py --smoke --out "$root/target/bench-smoke"

echo
if [ "${#failed_steps[@]}" -gt 0 ]; then
    echo "failed steps: ${failed_steps[*]}"
fi
echo "$passed passed, $failed failed"
rm -rf "$log"
[ "${#failed_steps[@]}" = 0 ] && [ "$failed" = 0 ]
