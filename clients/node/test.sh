#!/usr/bin/env bash
# The Node.js package's unit tests (node --test: the contract's vectors, the engine on a scripted
# pool, Express and Fastify on that pool) and the type check of index.d.ts (tsc --noEmit on
# test/types-usage.ts). Needs setup.sh. Ends with "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT

node --test --test-reporter=spec test/*.test.js 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
count() { grep -aE "^ℹ $1 [0-9]+" "$out" | tail -n 1 | awk '{print $3}'; }
passed=$(count pass); failed=$(count fail); skipped=$(count skipped)
passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}
[ "$rc" = 0 ] || [ "$failed" != 0 ] || failed=1 # the runner itself failed

echo "tsc --noEmit (index.d.ts, fastify.d.ts against test/types-usage.ts)"
if npx --no-install tsc -p tsconfig.json; then
    passed=$((passed + 1))
else
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
