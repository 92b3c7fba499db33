# shellcheck shell=bash
# The test command's steps: run, count, time and report them. Source this file (scripts/test.sh).
#
#   step NAME CMD...       runs CMD in the foreground, shows its output, counts its tests
#   step_bg NAME CMD...    starts CMD beside the next steps (its output is kept in a file);
#                          for a step that mostly waits on servers and sleeps, never one that
#                          compiles; join_steps shows and counts it
#   join_steps             waits for every step_bg, then shows and counts each, in start order
#   skip_step REASON       inside a step: the whole step is one skipped test
#   time_setup NAME CMD... runs CMD (an install, not a test) and puts its seconds in the table;
#                          returns CMD's status
#   report_steps           the table of every step's seconds, the slowest tests, the skipped
#                          tests, then the failed tests and steps (last, so a log's tail
#                          shows them), and the line "N passed, N failed, N skipped"
#
# Counting. A step's count is the sum of cargo's "test result:" lines, or else the last
# "N passed, N failed" line our runners print; a step that prints neither counts as one test.
# A client test that cannot run here calls the harness's skip_test (tests/harness/lib.rs),
# which cargo counts as passed: it also writes "SKIPPED: suite::test: reason" into the file
# PG_IDEM_SKIP_LOG names, which each step sets, and those lines are taken off its passed.
#
# Timing. Each step's wall-clock seconds (a background step's from its start to its end, so
# two steps side by side can add up to more than the total). The slowest tests come from
# libtest's per-test times (scripts/lib/run_suites.py runs the client suites with
# --report-time) and from pg_regress's and pg_isolation_regress's "ok N - name  123 ms" lines.

steps_log="$(mktemp -d)"
steps_passed=0
steps_failed=0
steps_skipped=0
steps_skipped_tests=()
steps_failed_steps=()
steps_failed_tests=()
steps_table=()
steps_started=$SECONDS
steps_bg_names=()
steps_bg_pids=()
steps_bg_t0=()

# steps_counts OUTPUT: "passed failed" of a step's output
steps_counts() {
    if grep -aq '^test result:' "$1"; then
        grep -a '^test result:' "$1" | sed -E 's/.* ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/' |
            awk '{ p += $1; f += $2 } END { print p + 0, f + 0 }'
    else
        grep -aE '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1 | sed -E 's/^([0-9]+) passed, ([0-9]+) failed.*/\1 \2/'
    fi
}

# steps_failure_lines OUTPUT: the lines that name a failed test, in each runner's words
# (libtest's "test X ... FAILED", TAP's "not ok", run_suites.py's and our scripts' "FAIL"),
# at most 20 so that one broken step cannot bury the rest
steps_failure_lines() {
    grep -aE '^test .* [.][.][.] FAILED|^not ok|^FAIL(ED)?[ :]|^run_suites: failed:' "$1" | head -n 20
}

# steps_account NAME RC SECONDS: adds a finished step's counts and time
steps_account() {
    local name="$1" rc="$2" seconds="$3" p f s=0 line
    read -r p f <<<"$(steps_counts "$steps_log/$name.out")"
    p=${p:-0}
    f=${f:-0}
    if [ "$p" = 0 ] && [ "$f" = 0 ]; then
        if [ "$rc" = 0 ]; then p=1; else f=1; fi
    elif [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        f=1 # failed without counting its failure
    fi
    if [ -s "$steps_log/$name.skipped" ]; then
        while IFS= read -r line; do
            steps_skipped_tests+=("$name: ${line#SKIPPED: }")
            s=$((s + 1))
        done < <(grep -a '^SKIPPED: ' "$steps_log/$name.skipped")
        p=$((p > s ? p - s : 0))
    fi
    steps_passed=$((steps_passed + p))
    steps_failed=$((steps_failed + f))
    steps_skipped=$((steps_skipped + s))
    [ "$rc" = 0 ] || steps_failed_steps+=("$name")
    if [ "$rc" != 0 ] || [ "$f" != 0 ]; then
        while IFS= read -r line; do
            steps_failed_tests+=("$name: $line")
        done < <(steps_failure_lines "$steps_log/$name.out")
    fi
    steps_table+=("$seconds $name $p $f $s")
    echo "---- $name: $p passed, $f failed, $s skipped (exit $rc, $seconds s)"
}

step() {
    local name="$1" rc t0=$SECONDS
    shift
    echo
    echo "==== $name"
    export PG_IDEM_SKIP_LOG="$steps_log/$name.skipped"
    "$@" 2>&1 | tee "$steps_log/$name.out"
    rc=${PIPESTATUS[0]}
    unset PG_IDEM_SKIP_LOG
    steps_account "$name" "$rc" $((SECONDS - t0))
}

step_bg() {
    local name="$1"
    shift
    echo
    echo "==== $name (started beside the next steps; its output follows when it ends)"
    (
        export PG_IDEM_SKIP_LOG="$steps_log/$name.skipped"
        "$@" >"$steps_log/$name.out" 2>&1 </dev/null
        echo $? >"$steps_log/$name.rc"
        echo $((SECONDS)) >"$steps_log/$name.end"
    ) &
    steps_bg_names+=("$name")
    steps_bg_pids+=($!)
    steps_bg_t0+=("$SECONDS")
}

join_steps() {
    local i name
    for i in "${!steps_bg_names[@]}"; do
        name="${steps_bg_names[$i]}"
        wait "${steps_bg_pids[$i]}"
        echo
        echo "==== $name (ran beside other steps)"
        cat "$steps_log/$name.out"
        steps_account "$name" "$(cat "$steps_log/$name.rc" 2>/dev/null || echo 1)" \
            $(($(cat "$steps_log/$name.end" 2>/dev/null || echo "$SECONDS") - ${steps_bg_t0[$i]}))
    done
    steps_bg_names=()
    steps_bg_pids=()
    steps_bg_t0=()
}

time_setup() {
    local name="$1" rc t0=$SECONDS
    shift
    "$@"
    rc=$?
    steps_table+=("$((SECONDS - t0)) $name - - -")
    return $rc
}

skip_step() {
    echo "SKIPPED: the whole step: $1" | tee -a "$PG_IDEM_SKIP_LOG"
}

# steps_slowest_tests N: "seconds step test" of the N slowest tests of every step's output
steps_slowest_tests() {
    local out name
    for out in "$steps_log"/*.out; do
        [ -e "$out" ] || continue
        name="$(basename "$out" .out)"
        # libtest with --report-time: "test NAME ... ok <1.234s>", after run_suites.py's
        # "Running tests/<subject>/SUITE.rs" or ".../SUITE/main.rs"
        awk -v step="$name" '
            /^ +Running / { n = split($2, part, "/"); suite = part[n]; sub(/[.]rs$/, "", suite)
                            if (suite == "main") suite = part[n - 1] }
            /^test .* [.][.][.] [a-zA-Z]+ <[0-9.]+s>$/ {
                t = $NF; gsub(/[<>s]/, "", t); printf "%s %s: %s::%s\n", t, step, suite, $2 }' "$out"
        # pg_regress and pg_isolation_regress: "ok 3   - name   123 ms" (and "not ok")
        sed -nE 's/^(not )?ok [0-9]+ +[-+] +([^ ]+) +([0-9]+) ms$/\3 \2/p' "$out" |
            awk -v step="$name" '{ printf "%.3f %s: %s\n", $1 / 1000, step, $2 }'
    done | sort -rn | head -n "$1" | while read -r seconds test; do
        printf '  %8.1f s  %s\n' "$seconds" "$test"
    done
}

report_steps() {
    echo
    echo "steps (seconds, passed, failed, skipped), slowest first:"
    printf '%s\n' "${steps_table[@]}" | sort -rn | while read -r seconds name p f s; do
        printf '  %6d s  %-40s %5s %4s %4s\n' "$seconds" "$name" "$p" "$f" "$s"
    done
    echo "the slowest tests:"
    steps_slowest_tests 10
    if [ "$steps_skipped" -gt 0 ]; then
        echo "skipped tests (step: suite::test: why):"
        printf '  %s\n' "${steps_skipped_tests[@]}"
    fi
    # the failures come last, next to the count, where a CI log's tail shows them
    if [ "${#steps_failed_tests[@]}" -gt 0 ]; then
        echo "failed tests (step: the runner's line):"
        printf '  %s\n' "${steps_failed_tests[@]}"
    fi
    if [ "${#steps_failed_steps[@]}" -gt 0 ]; then
        echo "failed steps: ${steps_failed_steps[*]}"
    fi
    echo "total time: $((SECONDS - steps_started)) s"
    if [ -n "${steps_budget:-}" ] && [ $((SECONDS - steps_started)) -gt "$steps_budget" ]; then
        echo "over budget: this run took more than its $steps_budget s (docs/testing.md): the table above shows where"
    fi
    echo "$steps_passed passed, $steps_failed failed, $steps_skipped skipped"
    rm -rf "$steps_log"
    [ "${#steps_failed_steps[@]}" = 0 ] && [ "$steps_failed" = 0 ]
}
