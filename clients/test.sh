#!/usr/bin/env bash
# The client packages' own tests, then the HTTP conformance suite against every reference app,
# with the native edition, the SQL edition and through PgBouncer in transaction mode
# (clients/conformance/run.sh). Needs pg_idem installed into the PostgreSQL whose pg_config is
# first in PATH, and clients/setup.sh run. Ends with "N passed, N failed, N skipped".
#
#   clients/test.sh             all of it
#   clients/test.sh packages    the packages' unit tests only
#   clients/test.sh conformance the conformance suite only
set -uo pipefail
cd "$(dirname "$0")" || exit 1
what="${1:-all}"
passed=0
failed=0
skipped=0
rc=0
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

# add OUTPUT: adds the last "N passed, N failed[, N skipped]" line a runner printed
add() {
    local line p f s
    line="$(grep -aE '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1)"
    [ -n "$line" ] || { failed=$((failed + 1)); return; }
    read -r p _ f _ s _ <<<"${line//,/}"
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + ${s:-0}))
}

if [ "$what" = all ] || [ "$what" = packages ]; then
    # each package's tests fail when its copy of contract.json differs from the source
    for package in python node rust java go; do
        echo "== clients/$package: tests"
        # indented: scripts/test.sh counts cargo's "test result:" lines when a step prints any,
        # and this step's count is the last line below
        "$package/test.sh" 2>&1 | tee "$out" | sed 's/^/    /'
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
        add "$out"
    done
fi
if [ "$what" = all ] || [ "$what" = conformance ]; then
    echo "== the HTTP conformance suite"
    conformance/run.sh 2>&1 | tee "$out" | sed 's/^/    /'
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    add "$out"
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$rc" = 0 ] && [ "$failed" = 0 ]
