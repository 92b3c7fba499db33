'use strict';
// The transaction handling of the engine, against a scripted pool.
const test = require('node:test');
const assert = require('node:assert/strict');
const engine = require('../lib/engine');
const core = require('../lib/core');
const { FakePool, claimRow, dbError } = require('./fake-pool');

const { sql } = core.contract;
const created = { status: 201, headers: [['content-type', 'application/json'], ['x-request-id', 'r']], body: Buffer.from('{"id":1}') };
const input = { method: 'post', route: '/payments', target: '/payments', keyHeader: '"k1"', tenant: 't', body: Buffer.from('{}') };

function poolFor(row, failures = {}) {
  return new FakePool(async (text) => {
    for (const [prefix, err] of Object.entries(failures)) if (text.startsWith(prefix)) throw err;
    if (text.startsWith('SELECT a.scoped_key')) return { command: 'SELECT', rows: [row] };
    return undefined;
  });
}

test('claimed, final: complete with the envelope, COMMIT, then the response unchanged', async () => {
  const pool = poolFor(claimRow('claimed'));
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
  // the handle: queries reach the claim's client; commit, rollback and release throw
  await attempt.ctx.client.query('SELECT 1');
  assert.equal(pool.log.at(-1).client, pool.clients[0].id);
  for (const end of ['commit', 'rollback', 'release']) assert.throws(() => attempt.ctx.client[end](), /cannot/);
  pool.allLog.pop();
  assert.equal(attempt.ctx.fence, '42'); // int8 stays the string pg gives
  const out = await attempt.settle(created, null);
  assert.equal(out, created);
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'complete', 'COMMIT']);
  const [, claim, complete] = pool.log;
  const params = ['t', 'POST', '/payments', 'k1', Buffer.from('{}'), null, null, '30000', '30000', '/payments'];
  assert.deepEqual([claim.text, claim.params], [core.statement('claim', 'public', null), params]);
  assert.deepEqual(complete.params.slice(0, 4), ['t', 'POST /payments k1', '42', 201]);
  assert.equal(complete.params[5], '1000'); // the claim's txid: the guard
  assert.deepEqual(JSON.parse(complete.params[4]), { http: 2, headers: { 'content-type': ['application/json'] }, body: '{"id":1}' });
  assert.deepEqual(pool.releases.map(({ err }) => err), [undefined]);
});

test('a final 4xx is stored with fail_final; fields mode passes the field list as $11', async () => {
  const pool = poolFor(claimRow('claimed'));
  const cfg = engine.resolveOptions({ singleTenant: 't', pool, fields: ['amount'], ttl: '1 day' });
  const { attempt } = await engine.start(cfg, input);
  await attempt.settle({ status: 402, headers: [], body: Buffer.alloc(0) }, null);
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'fail_final', 'COMMIT']);
  const params = ['t', 'POST', '/payments', 'k1', Buffer.from('{}'), null, '1 day', '30000', '30000', '/payments', ['amount']];
  assert.deepEqual([pool.log[1].text, pool.log[1].params], [core.statement('claim', 'public', ['amount']), params]);
});

test('non-final status or exception: ROLLBACK and the response as it is', async () => {
  for (const [response, exception] of [[{ ...created, status: 503 }, null], [created, new Error('boom')]]) {
    const pool = poolFor(claimRow('claimed'));
    const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
    assert.equal(await attempt.settle(response, exception), response);
    assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'ROLLBACK']);
  }
});

test('a connection lost while the handler runs: 503 unavailable, the client destroyed', async () => {
  const pool = poolFor(claimRow('claimed'));
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
  const fatal = Object.assign(new Error('terminating connection due to idle-in-transaction timeout'), { code: '25P03', severity: 'FATAL' });
  pool.clients[0].emit('error', fatal); // unhandled, this would crash the process
  const out = await attempt.settle(created, null);
  assert.equal(out.status, 503);
  assert.equal(out.body.toString(), core.errorBody('unavailable').toString());
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim']);
  assert.equal(pool.releases[0].err, fatal);
});

test('a completion that fails without SQLSTATE: 503, destroyed; with one: mapped', async () => {
  let pool = poolFor(claimRow('claimed'), { 'SELECT public.idem_complete': new Error('Connection terminated unexpectedly') });
  let { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
  let out = await attempt.settle(created, null);
  assert.equal(out.status, 503);
  assert.ok(pool.releases[0].err instanceof Error);

  pool = poolFor(claimRow('claimed'), { 'SELECT public.idem_complete': dbError('22001', 'value too long') });
  ({ attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, log() {} }), input));
  out = await attempt.settle(created, null);
  assert.equal(out.body.toString(), '{"error":"invalid_request","message":"value too long"}');
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'complete', 'ROLLBACK']);
  assert.equal(pool.releases[0].err, undefined);
});

test('a COMMIT that answers ROLLBACK (aborted transaction) is an error, not a success', async () => {
  const pool = new FakePool(async (text) => {
    if (text.startsWith('SELECT a.scoped_key')) return { command: 'SELECT', rows: [claimRow('claimed')] };
    if (text === 'COMMIT') return { command: 'ROLLBACK', rows: [] };
    return undefined;
  });
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, log() {} }), input);
  const out = await attempt.settle(created, null);
  assert.equal(out.status, 500);
});

test('outcomes other than claimed: ROLLBACK and the contract response', async () => {
  const cases = [
    [claimRow('in_progress'), 409, 'in_progress', '1'],
    [claimRow('in_progress', { retry_after: 3 }), 409, 'in_progress', '3'],
    [claimRow('mismatch'), 422, 'mismatch'],
    [claimRow('stale_key'), 400, 'stale_key'],
  ];
  for (const [row, status, name, retry] of cases) {
    const pool = poolFor(row);
    const { response } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
    assert.equal(response.status, status);
    assert.equal(response.body.toString(), core.errorBody(name).toString());
    const header = response.headers.find(([n]) => n === 'retry-after');
    assert.equal(header && header[1], retry);
    assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'ROLLBACK']);
  }
  const env = JSON.stringify({ http: 1, headers: { location: '/p/1' }, body: 'x' });
  const pool = poolFor(claimRow('completed', { response_code: 201, response_body: env }));
  const { response } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, replayHeader: 'X-Replay' }), input);
  assert.deepEqual(response, { status: 201, headers: [['location', '/p/1'], ['X-Replay', 'true']], body: Buffer.from('x') });
});

test('key problems answer before any database work', async () => {
  const pool = poolFor(claimRow('claimed'));
  const cfg = engine.resolveOptions({ singleTenant: 't', pool });
  assert.equal((await engine.start(cfg, { ...input, keyHeader: undefined })).response.status, 400);
  assert.equal((await engine.start(cfg, { ...input, keyHeader: '"x' })).response.body.toString(), core.errorBody('key_invalid').toString());
  assert.equal(pool.log.length, 0);
});

test('an optional key that is missing: a plain transaction, no claim', async () => {
  const pool = poolFor(null);
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, required: false }), { ...input, keyHeader: undefined });
  assert.equal(attempt.ctx.key, null);
  await attempt.settle(created, null);
  assert.deepEqual(pool.statements(), ['BEGIN', 'COMMIT']);
});

test('the database refusing connections: 503 unavailable', async () => {
  const pool = { connect: async () => { throw Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }); } };
  const { response } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool }), input);
  assert.equal(response.status, 503);
  assert.deepEqual(response.headers[1], ['retry-after', '1']);
});

test('lease mode: claim committed, completion under the fence in its own transaction', async () => {
  const pool = poolFor(claimRow('claimed', { attempt: 2, checkpoint_phase: 'sent', checkpoint_data: '{"n":1}' }));
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '30 seconds' }), input);
  const ctx = attempt.ctx;
  assert.equal(ctx.client, null);
  assert.deepEqual([ctx.attempt, ctx.checkpointPhase, ctx.checkpointData], [2, 'sent', { n: 1 }]);
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'COMMIT']);
  assert.equal(pool.log[1].params[5], '30 seconds');
  await ctx.checkpoint('charged', { ref: 'x' });
  await ctx.heartbeat();
  const client = await ctx.begin();
  assert.equal(ctx.client, client);
  await attempt.settle(created, null);
  assert.deepEqual(pool.statements().slice(3), [
    'BEGIN', 'checkpoint', 'COMMIT',
    'BEGIN', 'heartbeat', 'COMMIT',
    'BEGIN', 'assert_fence', 'complete', 'COMMIT',
  ]);
  assert.deepEqual(pool.log[4].params, ['t', 'POST /payments k1', '42', 'charged', '{"ref":"x"}']);
  assert.deepEqual(pool.log[7].params, ['t', 'POST /payments k1', '42', '30 seconds']);
  assert.ok(pool.releases.every(({ err }) => err === undefined));
});

test('lease mode: the package opens the completion transaction when the handler did not', async () => {
  const pool = poolFor(claimRow('claimed'));
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '1 second' }), input);
  await attempt.settle(created, null);
  assert.deepEqual(pool.statements().slice(3), ['BEGIN', 'assert_fence', 'complete', 'COMMIT']);
});

test('lease mode: 55000 anywhere is 409 lease_lost, the writes roll back, nothing released', async () => {
  for (const where of ['SELECT public.idem_assert_fence', 'SELECT public.idem_complete']) {
    const pool = poolFor(claimRow('claimed'), { [where]: dbError('55000', 'fence lost') });
    const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '1 second' }), input);
    const out = await attempt.settle(created, null);
    assert.equal(out.status, 409);
    assert.equal(out.body.toString(), core.errorBody('lease_lost').toString());
    assert.ok(out.headers.some(([n]) => n === 'retry-after'));
    assert.ok(!pool.statements().includes('release'));
    assert.equal(pool.statements().at(-1), 'ROLLBACK');
  }
});

test('lease mode: a handler that met 55000 in begin() answers lease_lost whatever it returns', async () => {
  const pool = poolFor(claimRow('claimed'), { 'SELECT public.idem_assert_fence': dbError('55000') });
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '1 second' }), input);
  await assert.rejects(attempt.ctx.begin());
  const out = await attempt.settle({ status: 500, headers: [], body: Buffer.from('oops') }, new Error('x'));
  assert.equal(out.status, 409);
});

test('lease mode: exception or non-final status: ROLLBACK, then release under the fence', async () => {
  const pool = poolFor(claimRow('claimed'));
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '1 second' }), input);
  await attempt.ctx.begin();
  const response = { status: 502, headers: [], body: Buffer.alloc(0) };
  assert.equal(await attempt.settle(response, null), response);
  assert.deepEqual(pool.statements().slice(3), ['BEGIN', 'assert_fence', 'ROLLBACK', 'BEGIN', 'release', 'COMMIT']);
  assert.deepEqual(pool.log.at(-2).params, ['t', 'POST /payments k1', '42']);
});

test('downstream keys: one short transaction per step, the same key on every call', async () => {
  const pool = new FakePool(async (text) => {
    if (text.startsWith('SELECT a.scoped_key')) return { command: 'SELECT', rows: [claimRow('claimed')] };
    if (text === core.statement('downstream_key', 'public')) return { command: 'SELECT', rows: [{ idem_downstream_key: 'uuid-1' }] };
    return undefined;
  });
  const { attempt } = await engine.start(engine.resolveOptions({ singleTenant: 't', pool, lease: '1 second' }), input);
  assert.equal(await attempt.ctx.downstreamKey('bank'), 'uuid-1');
  assert.equal(await attempt.ctx.downstreamKey('bank'), 'uuid-1');
  assert.deepEqual(pool.statements().slice(3), ['BEGIN', 'downstream_key', 'COMMIT']);
  assert.deepEqual(pool.log[4].params, ['t', 'POST /payments k1', 'bank']);
});
