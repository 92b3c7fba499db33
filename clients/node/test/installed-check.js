'use strict';
// Run by clients/release-check.sh in the directory where the released tarball was installed
// with npm: the installed package holds exactly what package.json's `files` lists, the licence
// and package.json, and loads with require and with import (named and default). Exits non-zero
// on any failure. (The README's quick start is clients/conformance/quickstart.py's.)
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { createRequire } = require('node:module');
const { pathToFileURL } = require('node:url');

const here = process.cwd();
const requireHere = createRequire(path.join(here, 'package.json'));

async function main() {
  const installed = path.join(here, 'node_modules', 'pg-idem-http');
  const files = fs.readdirSync(installed).sort();
  const want = ['LICENSE', 'README.md', 'contract.json', 'fastify.d.ts', 'index.d.ts', 'index.js', 'lib', 'package.json'];
  assert.deepEqual(files, want, 'the installed package\'s files');
  const cjs = requireHere('pg-idem-http');
  assert.equal(requireHere.resolve('pg-idem-http'), path.join(installed, 'index.js'));
  assert.equal(typeof cjs.idempotency, 'function');
  assert.equal(cjs.contract.contract_version, 2);
  // from an ES module in that directory, named and default imports
  const probe = pathToFileURL(path.join(here, 'probe.mjs'));
  fs.writeFileSync(probe, "export * from 'pg-idem-http'; export { default } from 'pg-idem-http';\n");
  const esm = await import(probe.href);
  for (const name of ['idempotency', 'pgIdemHttp', 'locate', 'claim', 'complete', 'fromKnex', 'outcomeCounts', 'contract']) {
    assert.equal(esm[name], cjs[name], `import { ${name} }`);
  }
  assert.equal(esm.default, cjs);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
