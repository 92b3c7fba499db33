#!/usr/bin/env bash
# Checks that tests/ is still the test plan it reads as (docs/testing.md, "tests/ as the test
# plan"), for scripts/test.sh's lint:
#   - every [[test]] of tests/Cargo.toml names a file that exists, and is named after it (name X
#     is tests/<subject>/X.rs or tests/<subject>/X/main.rs: `--test X` finds its file);
#   - every suite file on disk is a [[test]]: tests/<subject>/<suite>.rs and
#     tests/<subject>/<suite>/main.rs, apart from the shared library tests/harness/ (Cargo
#     discovers suites by itself only under tests/tests/, so a suite nobody listed would never
#     run); the other files of a suite folder are its modules;
#   - no .rs file under tests/ is longer than 1,000 lines (a longer suite becomes a suite folder:
#     main.rs and a module per group of tests).
# Run from anywhere in the repository; prints what is wrong and exits 1, or exits 0 silently.
set -euo pipefail
cd "$(dirname "$0")/.."

max_lines=1000
failed=0
fail() {
    echo "tests/check_suites.sh: $*" >&2
    failed=1
}

# name<TAB>path of every [[test]] (paths relative to tests/)
listed="$(awk '
    /^\[\[test\]\]$/ { if (name != "" || path != "") print name "\t" path; name = ""; path = ""; in_test = 1; next }
    /^\[/ { if (in_test) print name "\t" path; name = ""; path = ""; in_test = 0; next }
    in_test && /^name = "/ { name = $0; sub(/^name = "/, "", name); sub(/"$/, "", name) }
    in_test && /^path = "/ { path = $0; sub(/^path = "/, "", path); sub(/"$/, "", path) }
    END { if (in_test) print name "\t" path }
' tests/Cargo.toml)"
[ -n "$listed" ] || fail "tests/Cargo.toml lists no [[test]]"

while IFS=$'\t' read -r name path; do
    [ -n "$name" ] || continue
    if [ -z "$path" ]; then
        fail "[[test]] $name has no path = \"...\" in tests/Cargo.toml"
        continue
    fi
    [ -f "tests/$path" ] || fail "[[test]] $name: tests/$path does not exist"
    case "$path" in
        */"$name".rs | */"$name"/main.rs) ;;
        *) fail "[[test]] $name: its file tests/$path is not <subject>/$name.rs nor <subject>/$name/main.rs" ;;
    esac
done <<<"$listed"

# suite files on disk: tests/<subject>/<suite>.rs, tests/<subject>/<suite>/main.rs
listed_paths="$(cut -f2 <<<"$listed" | sort)"
on_disk="$(cd tests && {
    find . -mindepth 2 -maxdepth 2 -name '*.rs' -not -path './harness/*'
    find . -mindepth 3 -maxdepth 3 -name main.rs -not -path './harness/*'
} | sed 's|^\./||' | sort)"
while IFS= read -r file; do
    [ -n "$file" ] || continue
    grep -qxF -- "$file" <<<"$listed_paths" ||
        fail "tests/$file is a suite file no [[test]] of tests/Cargo.toml lists: it would never run"
done <<<"$on_disk"
# a suite straight in tests/ belongs in a subject folder
for file in tests/*.rs; do
    [ -e "$file" ] || continue
    fail "$file: a suite goes in a subject folder (tests/<subject>/), see docs/testing.md"
done

# no file over the limit
while IFS= read -r line; do
    count="${line%% *}"
    file="${line#* }"
    [ "$count" -le "$max_lines" ] ||
        fail "$file has $count lines, more than $max_lines: split it (a suite folder: main.rs and a module per group of tests)"
done < <(find tests -name '*.rs' -exec wc -l {} + | grep -v ' total$' | sed -E 's/^ *//')

exit "$failed"
