'use strict';
// Run by packed.sh in the directory where the tarball was installed: require and import of the
// installed package, then the README's Express quick start as pasted, against a database of its
// own (when PG_IDEM_NODE_TEST_DSN is set). Exits non-zero on any failure.
const assert = require('node:assert/strict');
const path = require('node:path');
const { createRequire } = require('node:module');
const { pathToFileURL } = require('node:url');

const here = process.cwd();
const requireHere = createRequire(path.join(here, 'package.json'));
const testDir = __dirname;

async function main() {
  const readme = process.argv[2];
  const cjs = requireHere('pg-idem-http');
  assert.equal(requireHere.resolve('pg-idem-http'), path.join(here, 'node_modules', 'pg-idem-http', 'index.js'));
  assert.equal(typeof cjs.idempotency, 'function');
  assert.equal(cjs.contract.contract_version, 2);
  // from an ES module in that directory, named and default imports
  const probe = pathToFileURL(path.join(here, 'probe.mjs'));
  require('node:fs').writeFileSync(probe, "export * from 'pg-idem-http'; export { default } from 'pg-idem-http';\n");
  const esm = await import(probe.href);
  for (const name of ['idempotency', 'pgIdemHttp', 'locate', 'claim', 'complete', 'fromKnex', 'outcomeCounts', 'contract']) {
    assert.equal(esm[name], cjs[name], `import { ${name} }`);
  }
  assert.equal(esm.default, cjs);
  console.log('require and import: ok');

  if (!process.env.PG_IDEM_NODE_TEST_DSN) {
    console.log('the quick start: skipped (no PG_IDEM_NODE_TEST_DSN)');
    return;
  }
  const db = require(path.join(testDir, 'db'));
  const { readmeBlock, startSnippet } = require(path.join(testDir, 'snippet'));
  const scratch = await db.scratchDatabase();
  let app;
  try {
    await db.sql('CREATE EXTENSION pg_idem', [], scratch.dsn);
    await db.sql('CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)', [], scratch.dsn);
    // no NODE_PATH: only what npm installed here
    const env = { DATABASE_URL: scratch.dsn, NODE_PATH: '' };
    app = await startSnippet(here, readmeBlock(readme, 'quickstart', 'express'), env);
    const first = await db.post(app.port, '/payments', { amount: 5 }, { key: 'k', tenant: 'acme' });
    assert.equal(first.status, 201, app.output());
    const again = await db.post(app.port, '/payments', { amount: 5 }, { key: 'k', tenant: 'acme' });
    assert.deepEqual([again.status, again.body, db.values(again, 'idempotent-replayed')], [201, first.body, ['true']]);
    console.log('the quick start from the installed tarball: ok');
  } finally {
    if (app) await app.stop();
    await scratch.drop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
