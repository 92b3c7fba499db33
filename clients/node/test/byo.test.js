'use strict';
// Bring your own transaction on a node-postgres client: claim and complete in the caller's
// transaction, against a real server; the txid guard when the transaction changed.
const test = require('node:test');
const assert = require('node:assert/strict');
const pg = require('pg');
const pkg = require('..');
const db = require('./db');

const response = { status: 201, headers: [['Content-Type', 'text/plain']], body: Buffer.from('ok') };

async function withClient(fn) {
  const client = new pg.Client({ connectionString: db.DSN });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const request = (schema, tenant, extra = {}) => ({
  schema,
  tenant,
  method: 'post',
  route: '/orders/:id',
  target: '/orders/7?x=%7e',
  keyHeader: '"k"',
  body: Buffer.from('{}'),
  ...extra,
});

test('claim and complete in the caller\'s transaction, then a replay', { skip: db.skip }, async () => {
  const tenant = db.fresh();
  await withClient(async (client) => {
    const { schema } = await pkg.locateOn(client);
    await client.query('BEGIN');
    const first = await pkg.claim(client, request(schema, tenant));
    assert.equal(first.outcome, 'claimed');
    assert.equal(first.claim.scopedKey, 'POST /orders/{id} k');
    await pkg.complete(client, first.claim, response);
    await client.query('COMMIT');

    await client.query('BEGIN');
    const again = await pkg.claim(client, request(schema, tenant));
    await client.query('ROLLBACK');
    assert.equal(again.outcome, 'replayed');
    assert.deepEqual(again.response.headers, [['content-type', 'text/plain'], ['Idempotent-Replayed', 'true']]);
    // the target is normalised before it is fingerprinted: %7e is ~
    await client.query('BEGIN');
    const same = await pkg.claim(client, request(schema, tenant, { target: '/orders/7?x=~' }));
    const other = await pkg.claim(client, request(schema, tenant, { target: '/orders/8?x=~' }));
    await client.query('ROLLBACK');
    assert.deepEqual([same.outcome, other.outcome], ['replayed', 'mismatch']);
  });
});

test('complete() in another transaction than the claim\'s: TransactionEndedError, nothing stored', { skip: db.skip }, async () => {
  const tenant = db.fresh();
  await withClient(async (client) => {
    const { schema } = await pkg.locateOn(client);
    await client.query('BEGIN');
    const { claim } = await pkg.claim(client, request(schema, tenant));
    await client.query('ROLLBACK');
    await client.query('BEGIN');
    const counts = pkg.outcomeCounts();
    await assert.rejects(pkg.complete(client, claim, response), (err) => err instanceof pkg.TransactionEndedError && err.response.status === 500);
    await client.query('ROLLBACK');
    assert.equal(pkg.outcomeCounts().transaction_ended, counts.transaction_ended + 1);
  });
  assert.deepEqual(await db.sql('SELECT 1 FROM idem.keys WHERE tenant = $1', [tenant]), []);
});

test('claim() refuses a missing tenant and a bad key before the database', async () => {
  const nothing = { query: () => assert.fail('no statement expected') };
  for (const tenant of [null, undefined, '']) {
    const r = await pkg.claim(nothing, request('public', tenant));
    assert.deepEqual([r.outcome, r.response.status, r.response.body.toString()], ['rejected', 400, pkg.errorBody('tenant_missing').toString()]);
  }
  const bad = await pkg.claim(nothing, request('public', 't', { keyHeader: '"x' }));
  assert.equal(bad.response.body.toString(), pkg.errorBody('key_invalid').toString());
});

test('fingerprint vectors: the contract\'s body expression, as the claim sends it', { skip: db.skip }, async () => {
  const { contract } = pkg;
  // the expression's own parameters ($2 method, $5 body, $10 target) as $1, $2, $3: a statement
  // may not leave a parameter unused
  const expression = contract.sql.fingerprint_body.replace(/\$(2|5|10)\b/g, (_, n) => ({ 2: '$1', 5: '$2', 10: '$3' })[n]);
  await withClient(async (client) => {
    for (const v of contract.vectors.fingerprint_body) {
      const { rows: [row] } = await client.query(`SELECT ${expression} AS fingerprint`, [v.method, Buffer.from(v.body_base64, 'base64'), pkg.normalizeTarget(v.target)]);
      assert.equal(row.fingerprint, v.fingerprint, `${v.method} ${v.target}`);
    }
  });
});
