'use strict';
// The Express 5 reference app (clients/CONTRACT.md "The reference apps"):
//   node clients/node/reference/express-app.js --dsn postgresql://... --port PORT
const express = require('express');
const { idempotency, idempotencyErrors } = require('..');
const common = require('./common');

const { groupHeaders } = common;

async function main() {
  const { dsn, port } = common.options();
  const pool = common.pool(dsn);
  await common.checkPgIdem(pool); // Express has no start hook: refuse to start here
  await common.createTables(pool);
  const shared = common.packageOptions(pool);

  const app = express();
  app.set('etag', false); // the response is the handler's, nothing added
  app.set('x-powered-by', false);

  const reply = (res, { status, headers, body }) => {
    res.status(status);
    // setHeader, not res.set/append (which add a charset); Link twice: an array, two lines
    for (const [name, values] of groupHeaders(headers)) res.setHeader(name, values.length === 1 ? values[0] : values);
    res.send(body);
  };

  // idempotency() reads the raw body itself (the fingerprint) and hands the handler parsed JSON
  app.post('/payments', idempotency(shared), async (req, res) => {
    reply(res, await common.payment(req.idem, req.body));
  });
  app.post(common.orderRoute, idempotency(shared), async (req, res) => {
    reply(res, await common.orderPayment(req.idem, req.params.order_id, req.body));
  });
  app.post('/payouts', idempotency({ ...shared, lease: common.payoutLease }), async (req, res) => {
    reply(res, await common.payout(req.idem, req.body));
  });
  app.get('/_pg_idem/outcomes', (req, res) => reply(res, common.outcomesResponse()));
  app.use(idempotencyErrors()); // an exception rolls back whatever status the error carries

  const server = app.listen(port, '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${server.address().port}`);
  });
  const stop = () => server.close(() => pool.end().then(() => process.exit(0)));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
