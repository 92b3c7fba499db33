# shellcheck shell=bash
# The release checks' counting, sourced by tests/release/*.sh: one "ok - ..." or "not ok - ..."
# line per check and "N passed, N failed" at the end, as the other runners print.
#
#   check DESCRIPTION CMD...        one check; CMD's output is shown (indented) only when it fails
#   check_shown DESCRIPTION CMD...  the same, with CMD's output shown as it runs
#   finish                          the last line, and exit 0 only when no check failed

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
