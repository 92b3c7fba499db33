'use strict';
// The Fastify 5 reference app (clients/CONTRACT.md "The reference apps"):
//   node clients/node/reference/fastify-app.js --dsn postgresql://... --port PORT
const Fastify = require('fastify');
const { pgIdemHttp } = require('..');
const common = require('./common');

async function main() {
  const { dsn, port } = common.options();
  const pool = common.pool(dsn);

  const app = Fastify();
  // a body that is not JSON reaches the handler (as undefined), whose 400 is stored and replayed
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, text, done) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch {
      value = undefined;
    }
    done(null, value);
  });
  // the plugin's options are every route's; each route's config turns it on (and adds the lease).
  // On ready it locates pg_idem and checks its version: app.listen() rejects when it cannot.
  await app.register(pgIdemHttp, common.packageOptions(pool));
  app.addHook('onReady', () => common.createTables(pool));

  const reply = (res, { status, headers, body }) => {
    res.code(status);
    for (const [name, values] of common.groupHeaders(headers)) res.header(name, values.length === 1 ? values[0] : values); // Link twice: two lines
    return res.send(body);
  };

  app.post('/payments', { config: { idempotency: true } }, async (request, res) =>
    reply(res, await common.payment(request.idem, request.body)),
  );
  app.post(common.orderRoute, { config: { idempotency: true } }, async (request, res) =>
    reply(res, await common.orderPayment(request.idem, request.params.order_id, request.body)),
  );
  app.post('/payouts', { config: { idempotency: { lease: common.payoutLease } } }, async (request, res) =>
    reply(res, await common.payout(request.idem, request.body)),
  );
  app.get('/_pg_idem/outcomes', async (request, res) => reply(res, common.outcomesResponse()));

  await app.listen({ port, host: '127.0.0.1' });
  console.log(`listening on http://127.0.0.1:${app.server.address().port}`);
  const stop = () => app.close().then(() => pool.end()).then(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
