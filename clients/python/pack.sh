#!/usr/bin/env bash
# Builds the package as PyPI gets it into the folder OUT, and prints each file's path:
#   pg_idem_http-<version>.tar.gz              the sdist
#   pg_idem_http-<version>-py3-none-any.whl    the wheel
# From a copy of this folder (the build's own files stay out of the tree), with the dev venv's
# setuptools and build (--no-isolation: no download). Needs ./setup.sh. clients/release.sh runs
# it; clients/release-check.sh checks what it makes.
#   clients/python/pack.sh OUT
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(cd "$1" && pwd)"
[ -x "$here/.venv/bin/python" ] || { echo "clients/python/pack.sh: run clients/python/setup.sh first" >&2; exit 1; }
copy="$(mktemp -d /tmp/pg_idem_http_py_pack.XXXXXX)"
trap 'rm -rf "$copy"' EXIT
tar -C "$here" --exclude=.venv --exclude=build --exclude=dist --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude='.*_cache' -cf - . | tar -C "$copy" -xf -
version="$(sed -nE 's/^version = "([^"]+)"/\1/p' "$here/pyproject.toml" | head -n 1)"
rm -f "$out/pg_idem_http-$version.tar.gz" "$out/pg_idem_http-$version-py3-none-any.whl"
(cd "$copy" && "$here/.venv/bin/python" -m build --no-isolation --sdist --wheel --outdir "$out") >&2
for file in "$out/pg_idem_http-$version.tar.gz" "$out/pg_idem_http-$version-py3-none-any.whl"; do
    [ -f "$file" ] || { echo "clients/python/pack.sh: the build made no $file" >&2; exit 1; }
    echo "$file"
done
