#!/usr/bin/env bash
# Checks scripts/lib/steps.sh's report, for scripts/lint.sh: a failing step's failed tests are
# named, in each runner's words, after the (long) skipped list and before the count, so that
# the tail of a CI log says what failed; a green run names none and exits 0.
# Prints what is wrong and exits 1, or exits 0 silently.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

failed=0
fail() {
    echo "tests/check_steps.sh: $*" >&2
    failed=1
}

# report_of SCRIPT: the report of a run of the steps SCRIPT declares, and its exit status last
report_of() {
    bash -c "source scripts/lib/steps.sh; $1; report_steps; echo \"exit \$?\"" 2>&1
}

green="$(report_of 'step quiet true; step skipping skip_step "nothing to run here"')"
grep -q '^exit 0$' <<<"$green" || fail "a green run did not exit 0"
grep -q '^failed' <<<"$green" && fail "a green run reported failures"
grep -q '^1 passed, 0 failed, 1 skipped$' <<<"$green" || fail "a green run's count is wrong: $(tail -n 2 <<<"$green")"

red="$(report_of '
    cargo_like() { printf "test a::b ... ok\ntest a::c ... FAILED\ntest result: FAILED. 1 passed; 1 failed; 0 ignored\n"; return 101; }
    tap_like() { printf "ok - one\nnot ok - two\n1 passed, 1 failed\n"; return 1; }
    silent() { return 3; }
    step cargo-step cargo_like
    step tap-step tap_like
    step silent-step silent
    step skipping skip_step "nothing to run here"')"
tail_lines="$(tail -n 7 <<<"$red" | sed -E 's/^total time: [0-9]+ s$/total time: T s/')"
expected="failed tests (step: the runner's line):
  cargo-step: test a::c ... FAILED
  tap-step: not ok - two
failed steps: cargo-step tap-step silent-step
total time: T s
2 passed, 3 failed, 1 skipped
exit 1"
[ "$tail_lines" = "$expected" ] || fail "a red run's report does not end with its failures:
$tail_lines"
exit $failed
