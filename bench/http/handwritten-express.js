// POST /payments with the glue written by hand (what a team writes without the package): the same
// claim, insert and completion as clients/node's reference app, for bench/runners/http_middleware.py.
//
//     node handwritten-express.js --dsn DSN --port PORT
'use strict';
const path = require('node:path');
const { parseArgs } = require('node:util');
// the Node package's dependencies (clients/node/setup.sh installs them)
const modules = path.join(__dirname, '..', '..', 'clients', 'node', 'node_modules');
const express = require(path.join(modules, 'express'));
const pg = require(path.join(modules, 'pg'));

const { values } = parseArgs({ options: { dsn: { type: 'string' }, port: { type: 'string' } } });
const pool = new pg.Pool({ connectionString: values.dsn, max: 10 });
const app = express();
app.use(express.text({ type: '*/*' }));

app.post('/payments', async (req, res) => {
  const key = req.get('idempotency-key');
  const tenant = req.get('x-tenant');
  if (!key || !tenant) return res.status(400).json({ error: 'key_missing' });
  const amount = JSON.parse(req.body).amount;
  const client = await pool.connect();
  let reply;
  try {
    await client.query('BEGIN');
    const { rows: [c] } = await client.query(
      "SELECT outcome, fence, response_code, response_body FROM idem_claim($1, $2, idem_request_hash('POST', '/payments', $3::jsonb))",
      [tenant, key, req.body]);
    if (c.outcome === 'completed' || c.outcome === 'failed') {
      reply = [c.response_code, c.response_body, { 'Idempotent-Replayed': 'true' }];
    } else if (c.outcome === 'in_progress') {
      reply = [409, { error: 'in_progress' }, { 'Retry-After': '1' }];
    } else if (c.outcome !== 'claimed') {
      reply = [422, { error: c.outcome }, {}];
    } else {
      const { rows: [p] } = await client.query(
        'INSERT INTO payments (tenant, idem_key, amount) VALUES ($1, $2, $3) RETURNING id', [tenant, key, amount]);
      const body = { id: Number(p.id), amount, currency: 'EUR', status: 'succeeded' };
      await client.query('SELECT idem_complete($1, $2, $3, 201, $4)', [tenant, key, c.fence, body]);
      reply = [201, body, { Location: `/payments/${p.id}` }];
    }
    await client.query(reply[0] === 201 ? 'COMMIT' : 'ROLLBACK');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    client.release(err);
    return res.status(500).json({ error: 'internal_error' });
  }
  client.release();
  res.status(reply[0]).set(reply[2]).json(reply[1]);
});

const server = app.listen(Number(values.port), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
