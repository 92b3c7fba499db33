'use strict';
// The Express middleware and the Fastify plugin over real HTTP / inject, on a scripted pool:
// the response leaves only after COMMIT, replays bypass the handler, errors roll back.
const test = require('node:test');
const assert = require('node:assert/strict');
const express = require('express');
const Fastify = require('fastify');
const { idempotency, idempotencyErrors, pgIdemHttp, errorBody } = require('..');
const { FakePool, claimRow } = require('./fake-pool');

const events = [];
function scriptedPool(row) {
  return new FakePool(async (text) => {
    if (text.startsWith('SELECT a.scoped_key')) return { command: 'SELECT', rows: [row] };
    if (text === 'COMMIT') {
      await new Promise((r) => setTimeout(r, 30));
      events.push('committed');
    }
    return undefined;
  });
}

async function withExpress(pool, routeOptions, handler, fn) {
  const app = express();
  app.post('/orders/:id', idempotency({ pool, ...routeOptions }), handler);
  app.use(idempotencyErrors());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((r) => server.once('listening', r));
  try {
    await fn(`http://127.0.0.1:${server.address().port}`);
  } finally {
    server.close();
  }
}

const post = (url, key, body = '{"amount":5}') =>
  fetch(`${url}/orders/7`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key }, body });

test('express: claimed, the handler writes in pieces, the response leaves after COMMIT', async () => {
  events.length = 0;
  const pool = scriptedPool(claimRow('claimed'));
  await withExpress(pool, { tenant: () => 'acme' }, async (req, res) => {
    assert.deepEqual(req.body, { amount: 5 });
    assert.equal(req.rawBody.toString(), '{"amount":5}');
    await req.idem.client.query('INSERT 1', []);
    res.writeHead(201, { 'Content-Type': 'text/plain', 'X-Other': 'o' });
    res.write('a');
    res.end(Buffer.from('b'));
  }, async (url) => {
    const r = await post(url, 'k1');
    events.push('received');
    assert.equal(r.status, 201);
    assert.equal(await r.text(), 'ab');
    assert.equal(r.headers.get('x-other'), 'o');
  });
  assert.deepEqual(events, ['committed', 'received']);
  const claim = pool.log[1];
  assert.deepEqual(claim.params.slice(0, 4), ['acme', 'POST', '/orders/{id}', 'k1']);
  assert.equal(claim.params[4].toString(), '{"amount":5}');
  assert.deepEqual(JSON.parse(pool.log[3].params[4]), { http: 1, headers: { 'content-type': 'text/plain' }, body: 'ab' });
});

test('express: an exception rolls back and the framework answers', async () => {
  const pool = scriptedPool(claimRow('claimed'));
  await withExpress(pool, {}, async () => {
    throw Object.assign(new Error('declined'), { status: 402 }); // a 4xx, but an exception
  }, async (url) => {
    const r = await post(url, 'k1');
    assert.equal(r.status, 402);
  });
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'ROLLBACK']);
});

test('express: a replay does not run the handler', async () => {
  const env = JSON.stringify({ http: 1, headers: { 'content-type': 'application/json' }, body: '{"n":12.50}' });
  const pool = scriptedPool(claimRow('failed', { response_code: 402, response_body: env }));
  await withExpress(pool, {}, () => assert.fail('the handler ran'), async (url) => {
    const r = await post(url, 'k1');
    assert.equal(r.status, 402);
    assert.equal(r.headers.get('idempotent-replayed'), 'true');
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.equal(await r.text(), '{"n":12.50}');
  });
});

test('express: a missing key is 400 key_missing', async () => {
  await withExpress(scriptedPool(null), {}, () => assert.fail('ran'), async (url) => {
    const r = await fetch(`${url}/orders/7`, { method: 'POST', body: '{}' });
    assert.equal(r.status, 400);
    assert.equal(await r.text(), errorBody('key_missing').toString());
  });
});

async function withFastify(pool, routeConfig, handler, fn) {
  const app = Fastify();
  await app.register(pgIdemHttp, { pool });
  app.post('/orders/:id', { config: { idempotency: routeConfig } }, handler);
  app.post('/plain', async () => ({ plain: true }));
  await app.ready();
  try {
    await fn(app);
  } finally {
    await app.close();
  }
}

const inject = (app, key, url = '/orders/7') =>
  app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', 'idempotency-key': key }, payload: '{"amount": 5}' });

test('fastify: claimed, completed and committed in onSend, raw body fingerprinted', async () => {
  events.length = 0;
  const pool = scriptedPool(claimRow('claimed'));
  await withFastify(pool, true, async (request, reply) => {
    assert.deepEqual(request.body, { amount: 5 });
    await request.idem.client.query('INSERT 1', []);
    events.push('handler');
    return reply.code(201).header('location', '/orders/7').send({ id: 7 });
  }, async (app) => {
    const r = await inject(app, 'k1');
    events.push('received');
    assert.equal(r.statusCode, 201);
    assert.equal(r.body, '{"id":7}');
  });
  assert.deepEqual(events, ['handler', 'committed', 'received']);
  assert.equal(pool.log[1].params[4].toString(), '{"amount": 5}');
  assert.equal(pool.log[1].params[2], '/orders/{id}');
  assert.deepEqual(JSON.parse(pool.log[3].params[4]).headers, {
    'content-type': 'application/json; charset=utf-8',
    location: '/orders/7',
  });
});

test('fastify: an exception rolls back; a non-idempotent route is untouched', async () => {
  const pool = scriptedPool(claimRow('claimed'));
  await withFastify(pool, {}, async () => {
    throw new Error('boom');
  }, async (app) => {
    assert.equal((await inject(app, 'k1')).statusCode, 500);
    assert.equal((await inject(app, 'k1', '/plain')).body, '{"plain":true}');
  });
  assert.deepEqual(pool.statements(), ['BEGIN', 'claim', 'ROLLBACK']);
});

test('fastify: in_progress answers from preHandler with Retry-After', async () => {
  const pool = scriptedPool(claimRow('in_progress', { retry_after: 4 }));
  await withFastify(pool, {}, () => assert.fail('ran'), async (app) => {
    const r = await inject(app, 'k1');
    assert.equal(r.statusCode, 409);
    assert.equal(r.headers['retry-after'], '4');
    assert.equal(r.body, errorBody('in_progress').toString());
  });
});

test('fastify: a connection lost during the handler is 503, the client destroyed', async () => {
  const pool = scriptedPool(claimRow('claimed'));
  await withFastify(pool, {}, async (request) => {
    request.idem.client.emit('error', new Error('Connection terminated unexpectedly'));
    return { ok: true };
  }, async (app) => {
    const r = await inject(app, 'k1');
    assert.equal(r.statusCode, 503);
    assert.equal(r.body, errorBody('unavailable').toString());
    assert.equal(r.headers['content-type'], 'application/json');
  });
  assert.ok(pool.releases[0].err instanceof Error);
});
