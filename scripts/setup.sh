#!/usr/bin/env bash
# Installs what pg_idem needs and is missing, and nothing else: Debian's PostgreSQL 15 with its
# server headers, clang for bindgen, sudo (pgrx's test runner uses it), python3-venv and Node.js
# for the client examples; cargo-pgrx 0.18.1; and pgrx's record of where PostgreSQL lives.
# Safe to run again: every step checks first.
set -euo pipefail

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

packages=(postgresql-15 postgresql-server-dev-15 postgresql-client-15 libclang-dev clang sudo python3-venv)
command -v node >/dev/null || packages+=(nodejs)
command -v npm >/dev/null || packages+=(npm)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Debian starts a cluster of its own on port 5432; pg_idem's scripts never use it
export PATH="/usr/lib/postgresql/15/bin:$PATH"

if ! cargo pgrx --version 2>/dev/null | grep -q "0.18.1"; then
    echo "setup: installing cargo-pgrx 0.18.1 (a few minutes on 2 cores)" >&2
    cargo install cargo-pgrx --version 0.18.1 --locked
fi

if ! grep -qs '^pg15 *=' "${PGRX_HOME:-$HOME/.pgrx}/config.toml"; then
    cargo pgrx init --pg15 /usr/bin/pg_config >&2
fi
echo "setup: ready" >&2
