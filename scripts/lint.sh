#!/usr/bin/env bash
# The lint of the test command, also run alone: formatting, clippy with warnings as errors, the
# layers of src/ (scripts/check_layers.py), the suite list of tests/ (tests/check_suites.sh),
# the test command's report (tests/check_steps.sh), ruff on the Python, shellcheck on every shell
# script, META.json's version against Cargo.toml's, and that every benchmark report the docs cite
# exists.
# Exits 1 when any of them fails (each runs).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
rc=0
cargo fmt --all --check || rc=1
cargo clippy --all-targets -p pg_idem_tests -- -D warnings || rc=1
cargo clippy --lib -p pg_idem -- -D warnings || rc=1
cargo clippy --all-targets -p pg_idem_rules -- -D warnings || rc=1
# each layer of src/ uses only the layers under it (src/lib.rs's list); no module cycle in the
# Rust client
python3 scripts/check_layers.py || rc=1
# every suite of tests/ is a [[test]] of tests/Cargo.toml and the other way round, none too long
tests/check_suites.sh || rc=1
# the test command's report ends with what failed (scripts/lib/steps.sh)
tests/check_steps.sh || rc=1
# the project's own Python with ruff's default rules (ruff.toml; the package's stricter settings
# in clients/python/pyproject.toml apply there), from a venv of its own under target/
ruff_venv=target/lint-venv
if [ ! -x "$ruff_venv/bin/ruff" ]; then
    python3 -m venv "$ruff_venv" && "$ruff_venv/bin/pip" install -q --disable-pip-version-check ruff==0.17.6 || rc=1
fi
"$ruff_venv/bin/ruff" check --quiet . || rc=1
# every tracked shell script at shellcheck's warning level (sourced files say their shell)
if command -v shellcheck >/dev/null; then
    git ls-files -z '*.sh' | xargs -0 shellcheck -S warning || rc=1
else
    echo "shellcheck is missing: scripts/setup.sh installs it (Debian: shellcheck)" >&2
    rc=1
fi
meta="$(python3 -c 'import json; print(json.load(open("META.json"))["version"])')"
cargo="$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -n 1)"
[ "$meta" = "$cargo" ] || { echo "META.json says $meta, Cargo.toml $cargo" >&2; rc=1; }
# every benchmark report the docs cite is there: bench/report/... in README.md, CONTRIBUTING.md,
# bench/README.md and docs/, and bench/README.md's links to report/...
for cited in $( { grep -ohE 'bench/report/[A-Za-z0-9_./-]*' README.md CONTRIBUTING.md bench/README.md docs/*.md
    grep -ohE '\(report/[^) ]*\)|`report/[^` ]*`' bench/README.md | tr -d '()`' | sed 's|^|bench/|'
} | sed -E 's/[.,:;]+$//' | sort -u); do
    [ -e "$cited" ] || { echo "the docs cite $cited, which does not exist" >&2; rc=1; }
done
[ "$rc" = 0 ] && echo "lint: clean"
exit $rc
