// Drives server.js the way a client with retries would, and checks what each key did.
//
//   node drive.js http://127.0.0.1:PORT
//
// Reads the database (for the final check) through the libpq variables, like the server.
// Prints one line per check and ends with "N passed, N failed"; exits 1 if any failed.

import { randomUUID } from 'node:crypto';
import pg from 'pg';

const URL = `${process.argv[2].replace(/\/$/, '')}/payments`;
const RUN = randomUUID().slice(0, 8); // keeps this run's tenants apart from earlier runs in the same database
const ACME = `acme-${RUN}`;
const GLOBEX = `globex-${RUN}`;
const results = [];

async function post(key, body, { tenant = ACME, raw } = {}) {
  const headers = { 'Content-Type': 'application/json', 'X-Tenant': tenant };
  if (key !== null) headers['Idempotency-Key'] = key;
  const response = await fetch(URL, {
    method: 'POST',
    headers,
    body: raw ?? JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  return { status: response.status, headers: response.headers, body: await response.text() };
}

function check(name, ok, detail = '') {
  results.push(Boolean(ok));
  const shown = detail?.status === undefined ? JSON.stringify(detail) : `${detail.status} ${detail.body}`;
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${shown}`);
}

const replayed = (r) => r.headers.get('idempotent-replayed') === 'true';
const expectedRows = new Map(); // JSON [tenant, key] -> payments rows it must have produced
const expect = (tenant, key, rows) => expectedRows.set(JSON.stringify([tenant, key]), rows);

// A first request runs the handler; its duplicates replay the stored response byte for byte.
let key = randomUUID();
const payment = { amount: 1250, currency: 'EUR' };
const first = await post(key, payment);
check('first request creates the payment', first.status === 201 && !replayed(first), first);
check(
  'response has payment_id, amount, currency',
  Object.keys(JSON.parse(first.body)).sort().join() === 'amount,currency,payment_id',
  first.body,
);
for (const i of [1, 2]) {
  const again = await post(key, payment);
  check(`duplicate ${i} replays the same bytes`, again.status === 201 && replayed(again) && again.body === first.body, again);
}
let again = await post(key, null, { raw: '{ "currency":"EUR",\n  "amount": 1250 }' });
check('same request spelled differently replays', again.status === 201 && replayed(again) && again.body === first.body, again);
expect(ACME, key, 1);

// Duplicates that arrive while the first attempt's transaction is open are told to retry.
key = randomUUID();
const slow = { amount: 500, currency: 'USD', sleep: 1.0 };
const answers = await Promise.all([0, 1, 2, 3].map(() => post(key, slow)));
const created = answers.filter((r) => r.status === 201 && !replayed(r));
const conflicts = answers.filter((r) => r.status === 409);
const summary = answers.map((r) => [r.status, r.body]);
check('concurrent duplicates: exactly one runs', created.length === 1, summary);
check(
  'concurrent duplicates: the others get 409 with Retry-After',
  conflicts.length === 3 && conflicts.every((r) => r.headers.get('retry-after')),
  summary,
);
again = await post(key, slow);
check(
  'retry after the slow request replays it',
  again.status === 201 && replayed(again) && created.length === 1 && again.body === created[0].body,
  again,
);
expect(ACME, key, 1);

// A key is bound to its request: reusing it for another one is refused.
key = randomUUID();
await post(key, { amount: 100, currency: 'EUR' });
const reused = await post(key, { amount: 999, currency: 'EUR' });
check('same key, different body: 422', reused.status === 422, reused);
expect(ACME, key, 1);

// A transient failure rolls the claim back with the payment: the retry runs once more.
key = randomUUID();
const flaky = { amount: 700, currency: 'GBP', fail_once: true };
const failure = await post(key, flaky);
check('transient failure: 503 with Retry-After', failure.status === 503 && failure.headers.get('retry-after'), failure);
const retried = await post(key, flaky);
check('retry after the failure runs the payment', retried.status === 201 && !replayed(retried), retried);
again = await post(key, flaky);
check('and is replayed afterwards', again.status === 201 && replayed(again) && again.body === retried.body, again);
expect(ACME, key, 1);

// A final error is stored like a success and replayed, without running the handler again.
key = randomUUID();
const declined = await post(key, { amount: 5_000_000, currency: 'EUR' });
check('declined payment: 402', declined.status === 402 && !replayed(declined), declined);
again = await post(key, { amount: 5_000_000, currency: 'EUR' });
check('declined payment is replayed', again.status === 402 && replayed(again) && again.body === declined.body, again);
expect(ACME, key, 0);

// Keys belong to a tenant: the same key in two tenants is two requests.
key = randomUUID();
const a = await post(key, payment, { tenant: ACME });
const b = await post(key, payment, { tenant: GLOBEX });
check(
  'same key in two tenants: both run',
  a.status === 201 && b.status === 201 && !replayed(a) && !replayed(b) &&
    JSON.parse(a.body).payment_id !== JSON.parse(b.body).payment_id,
  [a, b].map((r) => [r.status, r.body]),
);
expect(ACME, key, 1);
expect(GLOBEX, key, 1);

const missing = await post(null, payment);
check('missing Idempotency-Key: 400', missing.status === 400, missing);

// Whatever the client saw, each key must have produced its payments exactly once.
const db = new pg.Client();
await db.connect();
const { rows } = await db.query(
  `SELECT tenant, idem_key, count(*)::int AS n FROM payments
    WHERE tenant IN ($1, $2) GROUP BY tenant, idem_key`,
  [ACME, GLOBEX],
);
await db.end();
const actual = new Map(rows.map((r) => [JSON.stringify([r.tenant, r.idem_key]), r.n]));
const wrong = [...expectedRows].filter(([k, n]) => (actual.get(k) ?? 0) !== n);
const extra = [...actual.keys()].filter((k) => !expectedRows.has(k));
check('database: one payment per key, none for the declined one', wrong.length === 0 && extra.length === 0, {
  wrong: wrong.map(([k, n]) => [k, n, actual.get(k) ?? 0]),
  extra,
});

const failed = results.filter((ok) => !ok).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exitCode = failed ? 1 : 0;
