#!/usr/bin/env bash
# Installs the Node.js package's dependencies (pg, Express, Fastify, TypeScript and types) from
# the npm registry, exactly as package-lock.json pins them. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "clients/node/setup.sh: Node.js 20 or later is needed" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error >/dev/null
