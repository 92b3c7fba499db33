'use strict';
// Contract 2's rules through real HTTP: Express 5 and Fastify 5 on loopback, node:http as the
// client, a real PostgreSQL with pg_idem (test/db.js).
const { describe, test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const diagnostics = require('node:diagnostics_channel');
const pkg = require('..');
const db = require('./db');
const apps = require('./apps');

const { errorBody, outcomeCounts, OUTCOME_CHANNEL } = pkg;
const body = (name) => errorBody(name).toString();
const MIN = pkg.contract.min_pg_idem_version;

let pool;
before(async () => {
  if (db.skip) return;
  pool = db.newPool();
  await db.createTables();
});
after(async () => {
  if (pool) await pool.end();
});

/** Starts app `kind` with options (pool and the X-Tenant hook by default), runs fn, closes it. */
async function withApp(kind, options, fn) {
  const app = await apps.start[kind]({ pool, tenant: (req) => req.headers['x-tenant'], ...options });
  try {
    await fn(app.port);
  } finally {
    await app.close();
  }
}

const keyRow = (tenant) => db.sql('SELECT key, response_body::text AS body, state FROM idem.keys WHERE tenant = $1', [tenant]);
const payments = (tenant) => db.sql('SELECT amount FROM node_payments WHERE tenant = $1', [tenant]);

/** Collects the outcomes published on the channel while fn runs. */
async function published(fn) {
  const seen = [];
  const listener = (message) => seen.push(message);
  diagnostics.subscribe(OUTCOME_CHANNEL, listener);
  try {
    await fn();
  } finally {
    diagnostics.unsubscribe(OUTCOME_CHANNEL, listener);
  }
  return seen;
}

function delta(before) {
  const now = outcomeCounts();
  return Object.fromEntries(Object.entries(now).filter(([name]) => now[name] !== before[name]).map(([n, c]) => [n, c - before[n]]));
}

for (const kind of ['express', 'fastify']) {
  describe(`${kind}: contract 2 over HTTP`, { skip: db.skip }, () => {
    test('stored, then replayed: outcomes counted and published, route template {name}', async () => {
      const tenant = db.fresh();
      const counts = outcomeCounts();
      await withApp(kind, {}, async (port) => {
        const seen = await published(async () => {
          const first = await db.post(port, '/orders/7/pay', { amount: 5 }, { key: 'k1', tenant });
          assert.equal(first.status, 201);
          const again = await db.post(port, '/orders/7/pay', { amount: 5 }, { key: 'k1', tenant });
          assert.equal(again.status, 201);
          assert.equal(again.body, first.body);
          assert.deepEqual(db.values(again, 'idempotent-replayed'), ['true']);
        });
        assert.deepEqual(seen.map((m) => m.outcome), ['claimed', 'stored', 'replayed']);
        assert.deepEqual(
          { method: seen[0].method, route: seen[0].route, tenant: seen[0].tenant, key: seen[0].key },
          { method: 'POST', route: '/orders/{order_id}/pay', tenant, key: 'k1' },
        );
      });
      assert.deepEqual(delta(counts), { claimed: 1, stored: 1, replayed: 1 });
      const [row] = await keyRow(tenant);
      assert.equal(row.key, 'POST /orders/{order_id}/pay k1');
      assert.deepEqual(await payments(tenant), [{ amount: '5' }]);
    });

    test('the fingerprint binds the request target: another order or query string is 422', async () => {
      const tenant = db.fresh();
      await withApp(kind, {}, async (port) => {
        assert.equal((await db.post(port, '/orders/7/pay', { amount: 5 }, { key: 'k', tenant })).status, 201);
        const other = await db.post(port, '/orders/8/pay', { amount: 5 }, { key: 'k', tenant });
        assert.equal(other.status, 422);
        assert.equal(other.body, body('mismatch'));
        const query = await db.post(port, '/orders/7/pay?coupon=x', { amount: 5 }, { key: 'k', tenant });
        assert.equal(query.status, 422);
        // normalised, not decoded: an empty query and an escaped unreserved character are the same target
        assert.equal((await db.post(port, '/orders/7/pay?', { amount: 5 }, { key: 'k', tenant })).status, 201);
        assert.equal((await db.post(port, '/payments?q=%41', { amount: 5 }, { key: 'q', tenant })).status, 201);
        const same = await db.post(port, '/payments?q=A', { amount: 5 }, { key: 'q', tenant });
        assert.deepEqual([same.status, db.values(same, 'idempotent-replayed')], [201, ['true']]);
      });
      assert.equal((await payments(tenant)).length, 2);
    });

    test('a tenant hook answering null, undefined or "" is 400 tenant_missing before any claim', async () => {
      for (const answer of [null, undefined, '']) {
        const counts = outcomeCounts();
        await withApp(kind, { tenant: () => answer }, async (port) => {
          const r = await db.post(port, '/payments', { amount: 5 }, { key: db.fresh() });
          assert.equal(r.status, 400);
          assert.equal(r.body, body('tenant_missing'));
          assert.deepEqual(db.values(r, 'content-type'), ['application/json']);
        });
        assert.deepEqual(delta(counts), { rejected: 1 });
      }
    });

    test('singleTenant: every caller in the one namespace it names', async () => {
      const tenant = db.fresh();
      await withApp(kind, { tenant: undefined, singleTenant: tenant }, async (port) => {
        assert.equal((await db.post(port, '/payments', { amount: 5 }, { key: 'k' })).status, 201);
      });
      assert.equal((await keyRow(tenant)).length, 1);
    });

    test('envelope http 2: a header given twice stored as an array in order, replayed as two lines; set-cookie never', async () => {
      const tenant = db.fresh();
      await withApp(kind, { storedHeaders: ['content-type', 'location', 'link'] }, async (port) => {
        const first = await db.post(port, '/payments', { amount: 5, links: true, cookie: true }, { key: 'k', tenant });
        assert.deepEqual(db.values(first, 'link'), ['</a>; rel="first"', '</b>; rel="next"']);
        assert.deepEqual(db.values(first, 'set-cookie'), ['session=secret']); // the first answer is the handler's
        const again = await db.post(port, '/payments', { amount: 5, links: true, cookie: true }, { key: 'k', tenant });
        assert.deepEqual(db.values(again, 'link'), ['</a>; rel="first"', '</b>; rel="next"']);
        assert.deepEqual(db.values(again, 'set-cookie'), []);
      });
      const stored = JSON.parse((await keyRow(tenant))[0].body);
      assert.equal(stored.http, 2);
      assert.deepEqual(stored.headers.link, ['</a>; rel="first"', '</b>; rel="next"']);
      assert.ok(!('set-cookie' in stored.headers));
    });

    test('a contract-1 envelope (http 1) written before replays', async () => {
      const tenant = db.fresh();
      await withApp(kind, {}, async (port) => {
        assert.equal((await db.post(port, '/payments', { amount: 5 }, { key: 'k', tenant })).status, 201);
        await db.sql(
          `UPDATE idem.keys SET response_body = '{"http": 1, "headers": {"content-type": "text/plain", "location": "/p/1"}, "body": "ok"}' WHERE tenant = $1`,
          [tenant],
        );
        const again = await db.post(port, '/payments', { amount: 5 }, { key: 'k', tenant });
        assert.deepEqual([again.status, again.body, db.values(again, 'location')], [201, 'ok', ['/p/1']]);
        assert.ok(db.values(again, 'content-type')[0].startsWith('text/plain'));
      });
    });

    test('the handle refuses commit, rollback and release: 500, nothing stored, the retry runs', async () => {
      for (const how of ['api', 'release']) {
        const tenant = db.fresh();
        await withApp(kind, { log() {} }, async (port) => {
          const r = await db.post(port, '/payments', { amount: 5, commit: how }, { key: 'k', tenant });
          assert.equal(r.status, 500);
          assert.deepEqual(await keyRow(tenant), []);
          assert.deepEqual(await payments(tenant), []);
          assert.equal((await db.post(port, '/payments', { amount: 5 }, { key: 'k', tenant })).status, 201);
        });
      }
    });

    test('COMMIT or ROLLBACK sent as SQL: 500 internal_error, transaction_ended, logged', async () => {
      for (const how of ['sql', 'rollback-sql']) {
        const tenant = db.fresh();
        const logged = [];
        const counts = outcomeCounts();
        await withApp(kind, { log: (err) => logged.push(err) }, async (port) => {
          const r = await db.post(port, '/payments', { amount: 5, commit: how }, { key: 'k', tenant });
          assert.equal(r.status, 500);
          assert.equal(r.body, body('internal_error'));
        });
        assert.deepEqual(delta(counts), { claimed: 1, transaction_ended: 1 });
        assert.equal(logged.length, 1);
        assert.match(String(logged[0]), /transaction was ended/);
        // nothing stored: after COMMIT the key stays in progress (ttl or idem_forget), after ROLLBACK it is gone
        const rows = await keyRow(tenant);
        if (how === 'sql') assert.deepEqual([rows[0].body, rows[0].state], [null, 'p']);
        else assert.deepEqual(rows, []);
      }
    });

    test('the schema option: pg_idem found where it says, quoted', async () => {
      const tenant = db.fresh();
      await withApp(kind, { schema: 'public' }, async (port) => {
        assert.equal((await db.post(port, '/payments', { amount: 5 }, { key: 'k', tenant })).status, 201);
      });
    });
  });
}

describe('configuration refused before any request', { skip: db.skip }, () => {
  test('no tenant hook nor singleTenant, or both', async () => {
    assert.throws(() => pkg.idempotency({ pool }), /a tenant is required/);
    assert.throws(() => pkg.idempotency({ pool, tenant: () => 't', singleTenant: 't' }), /not both/);
    await assert.rejects(apps.start.fastify({ pool }), /a tenant is required/);
  });

  test('a never-stored header in the allow-list', async () => {
    assert.throws(() => pkg.idempotency({ pool, singleTenant: 't', storedHeaders: ['etag', 'Set-Cookie'] }), /set-cookie/);
    await assert.rejects(apps.start.fastify({ pool, singleTenant: 't', storedHeaders: ['authorization'] }), /authorization/);
  });
});

describe('refusing to start', { skip: db.skip }, () => {
  test('pg_idem not installed: locate rejects, Fastify does not start, Express answers 500', async () => {
    const scratch = await db.scratchDatabase();
    const other = db.newPool(scratch.dsn);
    try {
      await assert.rejects(pkg.locate(other), (err) => err instanceof pkg.PgIdemSetupError && /not installed/.test(err.message));
      await assert.rejects(apps.start.fastify({ pool: other, singleTenant: 't' }), /not installed/);
      const logged = [];
      const app = await apps.start.express({ pool: other, singleTenant: 't', log: (e) => logged.push(e) });
      try {
        const r = await db.post(app.port, '/payments', { amount: 5 }, { key: 'k' });
        assert.deepEqual([r.status, r.body], [500, body('internal_error')]);
        assert.match(String(logged[0]), /not installed/);
      } finally {
        await app.close();
      }
    } finally {
      await other.end();
      await scratch.drop();
    }
  });

  test('a look-alike idem_* function of another role in its schema: named', async () => {
    const scratch = await db.scratchDatabase();
    const other = db.newPool(scratch.dsn);
    const role = `intruder_${db.fresh().slice(0, 8)}`;
    try {
      await db.sql('CREATE EXTENSION pg_idem', [], scratch.dsn);
      await db.sql(`CREATE ROLE ${role}`, [], scratch.dsn);
      await db.sql(`CREATE FUNCTION public.idem_claim(text) RETURNS text LANGUAGE sql AS 'SELECT $1'`, [], scratch.dsn);
      await db.sql(`ALTER FUNCTION public.idem_claim(text) OWNER TO ${role}`, [], scratch.dsn);
      await assert.rejects(pkg.locate(other), /idem_claim\(text\)/);
    } finally {
      await other.end();
      await scratch.drop();
      await db.sql(`DROP ROLE ${role}`);
    }
  });

  test('an older pg_idem: both versions named, or the minimum when it has no idem_version()', async () => {
    const scratch = await db.scratchDatabase();
    const other = db.newPool(scratch.dsn);
    try {
      await db.sql(`CREATE SCHEMA "Old"; CREATE FUNCTION "Old".idem_version() RETURNS text LANGUAGE sql AS $$SELECT '0.4.9'$$`, [], scratch.dsn);
      await assert.rejects(pkg.locate(other, { schema: 'Old' }), new RegExp(`0\\.4\\.9 is installed; this package needs ${MIN.replaceAll('.', '\\.')}`));
      // a schema without idem_version() at all: older than the minimum, named
      await db.sql('CREATE SCHEMA "Older"', [], scratch.dsn);
      await assert.rejects(pkg.locate(other, { schema: 'Older' }), (err) => err instanceof pkg.PgIdemSetupError && /no idem_version\(\)/.test(err.message) && err.message.includes(pkg.contract.min_pg_idem_version));
    } finally {
      await other.end();
      await scratch.drop();
    }
  });
});
