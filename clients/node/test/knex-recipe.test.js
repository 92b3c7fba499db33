'use strict';
// The README's Knex recipe, run as pasted: written to a directory of its own (pg-idem-http
// linked into its node_modules, knex, express and pg found through NODE_PATH), started with
// DATABASE_URL and PORT against a database of its own, and asked over HTTP.
const test = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const db = require('./db');
const { readmeBlock, startSnippet } = require('./snippet');

const PACKAGE = path.join(__dirname, '..');

test('the Knex recipe of the README runs as pasted', { skip: db.skip }, async () => {
  const block = readmeBlock(path.join(PACKAGE, 'README.md'), 'recipe', 'knex');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pg-idem-knex-'));
  const scratch = await db.scratchDatabase();
  let app;
  try {
    await db.sql('CREATE EXTENSION pg_idem', [], scratch.dsn);
    await db.sql('CREATE TABLE payments (id bigserial PRIMARY KEY, tenant text, amount bigint)', [], scratch.dsn);
    fs.mkdirSync(path.join(dir, 'node_modules'));
    fs.symlinkSync(PACKAGE, path.join(dir, 'node_modules', 'pg-idem-http'));
    app = await startSnippet(dir, block, { DATABASE_URL: scratch.dsn, NODE_PATH: path.join(PACKAGE, 'node_modules') });
    const { port } = app;
    const output = app.output();
    const first = await db.post(port, '/payments', { amount: 5 }, { key: 'k1', tenant: 'acme' });
    assert.equal(first.status, 201, output);
    assert.deepEqual(db.values(first, 'idempotent-replayed'), []);
    const again = await db.post(port, '/payments', { amount: 5 }, { key: 'k1', tenant: 'acme' });
    assert.deepEqual([again.status, again.body, db.values(again, 'idempotent-replayed')], [201, first.body, ['true']]);
    assert.deepEqual(db.values(again, 'location'), db.values(first, 'location'));
    const other = await db.post(port, '/payments', { amount: 6 }, { key: 'k1', tenant: 'acme' });
    assert.equal(other.status, 422);
    const anonymous = await db.post(port, '/payments', { amount: 5 }, { key: 'k2' });
    assert.equal(anonymous.status, 400);
    assert.deepEqual(await db.sql('SELECT tenant, amount FROM payments', [], scratch.dsn), [{ tenant: 'acme', amount: '5' }]);
    const [stored] = await db.sql('SELECT response_code, response_body->>\'http\' AS http FROM idem.keys', [], scratch.dsn);
    assert.deepEqual(stored, { response_code: 201, http: '2' });
  } finally {
    if (app) await app.stop();
    await scratch.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
