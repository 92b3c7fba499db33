'use strict';
// The Fastify 5 reference app (clients/CONTRACT.md "The reference apps"):
//   node clients/node/reference/fastify-app.js --dsn postgresql://... --port PORT
const Fastify = require('fastify');
const { pgIdemHttp } = require('..');
const common = require('./common');

async function main() {
  const { dsn, port } = common.options();
  const pool = common.pool(dsn);
  await common.createTables(pool);

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
  // the plugin's options are every route's; each route's config turns it on (and adds the lease)
  await app.register(pgIdemHttp, common.packageOptions(pool));

  // before any claim (application hooks run before the route's, so before the claim)
  app.addHook('preHandler', async (request, reply) => {
    if (request.headers['x-tenant']) return;
    return reply.code(400).header('Content-Type', 'application/json').send(common.tenantMissing);
  });
  const reply = (res, { status, headers, body }) => res.code(status).headers(headers).send(body);

  app.post('/payments', { config: { idempotency: true } }, async (request, res) =>
    reply(res, await common.payment(request.idem, request.body)),
  );
  app.post('/payouts', { config: { idempotency: { lease: common.payoutLease } } }, async (request, res) =>
    reply(res, await common.payout(request.idem, request.body)),
  );

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
