#!/usr/bin/env bash
# Creates clients/python/.venv with this package (editable) and what its tests, its reference
# apps and the conformance suite use: FastAPI, Django, uvicorn (the FastAPI reference app's
# server: no extra of the package names a server), psycopg (binary), psycopg_pool, SQLAlchemy
# (the bring-your-own-transaction recipe), OpenTelemetry's API and SDK (the optional `otel`
# extra), pytest, pytest-xdist (the conformance suite runs its apps side by side), ruff, mypy
# and build (clients/python/test.sh lints, type-checks and builds the sdist and wheel).
# Idempotent: run again, it only checks. Needs python3 with venv (Debian: python3-venv).
set -euo pipefail
cd "$(dirname "$0")"
# a venv whose interpreter is gone (python upgraded, tree copied) is made anew
if [ -d .venv ] && ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
    rm -rf .venv
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check \
    -e '.[fastapi,django,binary,otel,sqlalchemy,test]' 'psycopg[binary]' psycopg_pool uvicorn \
    opentelemetry-sdk pytest pytest-xdist ruff mypy build 'setuptools>=77'
versions="$(.venv/bin/python -c 'import pg_idem_http, psycopg, psycopg_pool, fastapi, django, uvicorn, pytest, xdist, sqlalchemy, opentelemetry.sdk
print(f"pg_idem_http {pg_idem_http.__version__}, psycopg {psycopg.__version__}, fastapi {fastapi.__version__}, django {django.__version__}")')"
echo "clients/python/.venv ready: $versions"
