#!/usr/bin/env bash
# Creates clients/python/.venv with this package (editable) and what its tests, its reference
# apps and the conformance suite use: FastAPI, Django, uvicorn, psycopg (binary), psycopg_pool,
# pytest, and pytest-xdist (the conformance suite runs its apps side by side). Idempotent: run
# again, it only checks. Needs python3 with venv (Debian: python3-venv).
set -euo pipefail
cd "$(dirname "$0")"
# a venv whose interpreter is gone (python upgraded, tree copied) is made anew
if [ -d .venv ] && ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    rm -rf .venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check \
    -e '.[fastapi,django,binary,test]' 'psycopg[binary]' psycopg_pool uvicorn pytest pytest-xdist
versions="$(.venv/bin/python -c 'import pg_idem_http, psycopg, psycopg_pool, fastapi, django, uvicorn, pytest, xdist
print(f"pg_idem_http {pg_idem_http.__version__}, psycopg {psycopg.__version__}, fastapi {fastapi.__version__}, django {django.__version__}")')"
echo "clients/python/.venv ready: $versions"
