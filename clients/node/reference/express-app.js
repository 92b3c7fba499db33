'use strict';
// The Express 5 reference app (clients/CONTRACT.md "The reference apps"):
//   node clients/node/reference/express-app.js --dsn postgresql://... --port PORT
const express = require('express');
const { idempotency, idempotencyErrors } = require('..');
const common = require('./common');

async function main() {
  const { dsn, port } = common.options();
  const pool = common.pool(dsn);
  await common.createTables(pool);
  const shared = common.packageOptions(pool);

  const app = express();
  app.set('etag', false); // the response is the handler's, nothing added
  app.set('x-powered-by', false);

  // before any claim
  const requireTenant = (req, res, next) => {
    if (req.get('X-Tenant')) return next();
    res.status(400).setHeader('Content-Type', 'application/json');
    res.send(common.tenantMissing);
  };
  const reply = (res, { status, headers, body }) => {
    res.status(status);
    for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    res.send(body);
  };

  // idempotency() reads the raw body itself (the fingerprint) and hands the handler parsed JSON
  app.post('/payments', requireTenant, idempotency(shared), async (req, res) => {
    reply(res, await common.payment(req.idem, req.body));
  });
  app.post('/payouts', requireTenant, idempotency({ ...shared, lease: common.payoutLease }), async (req, res) => {
    reply(res, await common.payout(req.idem, req.body));
  });
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
