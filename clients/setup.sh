#!/usr/bin/env bash
# Installs what the client packages need, each with its own setup.sh: the Python venv
# (clients/python/.venv: the package, FastAPI, Django, uvicorn, psycopg, pytest), the Node.js
# package's node_modules (npm ci), the Rust crate's reference app (cargo build, into the
# workspace's target directory), and the Java package's jars (Debian's JDK, Tomcat and PgJDBC;
# javac offline). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
./sync-contract.sh
for package in python node rust java; do
    echo "== clients/$package: setup"
    "$package/setup.sh"
done
