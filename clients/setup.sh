#!/usr/bin/env bash
# Installs what the client packages need, each with its own setup.sh: the Python venv
# (clients/python/.venv: the package, FastAPI, Django, uvicorn, psycopg, pytest), the Node.js
# package's node_modules (npm ci), the Rust crate's reference app (cargo build, into the
# workspace's target directory), the Java package's jars (Debian's JDK, Tomcat and PgJDBC;
# javac offline) and the Go reference app (clients/go/bin, built offline from Debian's
# packages). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
./sync-contract.sh
for package in python node rust java go; do
    echo "== clients/$package: setup"
    "$package/setup.sh"
done
