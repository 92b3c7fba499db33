#!/usr/bin/env bash
# The package as npm would publish it: `npm pack`, the tarball installed with its peers into a
# clean directory (--prefer-offline: from npm's cache where it can), then test/packed-check.js run
# there: require and import of the installed package, and the README's Express quick start
# (against PG_IDEM_NODE_TEST_DSN when set).
#   test/packed.sh DIR
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dir="$1"
mkdir -p "$dir"
cd "$here"
tarball="$(npm pack --silent --pack-destination "$dir" | tail -n 1)"
cd "$dir"
echo '{ "name": "pg-idem-http-packed-check", "private": true }' >package.json
# the peers at the versions this package is tested with (package-lock.json)
peer() { node -p "require('$here/package-lock.json').packages['node_modules/$1'].version"; }
npm install --prefer-offline --no-audit --no-fund --loglevel=error "./$tarball" \
    "pg@$(peer pg)" "express@$(peer express)" "fastify@$(peer fastify)" >/dev/null
# only what `files` lists is in the package, and the licence (prepack copies the repository's)
node -e "
const fs = require('fs');
const files = fs.readdirSync('node_modules/pg-idem-http').sort();
const want = ['LICENSE', 'README.md', 'contract.json', 'fastify.d.ts', 'index.d.ts', 'index.js', 'lib', 'package.json'];
if (JSON.stringify(files) !== JSON.stringify(want)) { console.error('packed files:', files); process.exit(1); }
"
node "$here/test/packed-check.js" "$here/README.md"
