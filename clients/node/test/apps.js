'use strict';
// Small Express and Fastify apps for the HTTP tests, one handler for both: listening on
// loopback, the package configured as each test asks.
const express = require('express');
const Fastify = require('fastify');
const { idempotency, idempotencyErrors, pgIdemHttp } = require('..');

/**
 * POST /payments and POST /orders/:order_id/pay. Body {amount, links?, cookie?, commit?:
 * 'api'|'sql'|'rollback-sql', status?}: inserts into node_payments through the handle, then
 * 201 (or `status`) with Location, one Link line per value, Set-Cookie when asked.
 */
async function handler(idem, orderId, body) {
  const { rows: [row] } = await idem.client.query(
    'INSERT INTO node_payments (tenant, idem_key, amount, order_id) VALUES ($1, $2, $3, $4) RETURNING id',
    [idem.tenant, idem.key, body.amount, orderId ?? null],
  );
  if (body.commit === 'api') idem.client.commit();
  if (body.commit === 'release') idem.client.release();
  if (body.commit === 'sql') await idem.client.query('COMMIT');
  if (body.commit === 'rollback-sql') await idem.client.query('ROLLBACK');
  const headers = [['Location', `/payments/${row.id}`]];
  if (body.links) for (const link of ['</a>; rel="first"', '</b>; rel="next"']) headers.push(['Link', link]);
  if (body.cookie) headers.push(['Set-Cookie', 'session=secret']);
  return { status: body.status ?? 201, headers, json: { id: Number(row.id), tenant: idem.tenant } };
}

async function expressApp(options) {
  const app = express();
  app.set('etag', false);
  const route = idempotency(options);
  const run = async (req, res) => {
    const out = await handler(req.idem, req.params.order_id, req.body);
    res.status(out.status);
    for (const [name, value] of out.headers) res.append(name, value); // getHeader: an array
    res.json(out.json);
  };
  app.post('/payments', route, run);
  app.post('/orders/:order_id/pay', route, run);
  app.use(idempotencyErrors());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  return { port: server.address().port, close: () => new Promise((resolve) => server.close(resolve)) };
}

async function fastifyApp(options) {
  const app = Fastify();
  await app.register(pgIdemHttp, options);
  const run = async (request, reply) => {
    const out = await handler(request.idem, request.params.order_id, request.body);
    reply.code(out.status);
    const grouped = new Map();
    for (const [name, value] of out.headers) grouped.set(name, [...(grouped.get(name) || []), value]);
    for (const [name, list] of grouped) reply.header(name, list.length === 1 ? list[0] : list);
    return reply.send(out.json);
  };
  app.post('/payments', { config: { idempotency: true } }, run);
  app.post('/orders/:order_id/pay', { config: { idempotency: true } }, run);
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { port: app.server.address().port, close: () => app.close() };
}

const start = { express: expressApp, fastify: fastifyApp };

module.exports = { start, handler };
