// POST /payments with exactly-once effects, using pg_idem in the payment's own transaction.
//
//   node server.js [PORT]     (0 or nothing: any free port; the chosen one is printed)
//
// Connects with the usual libpq variables (PGHOST, PGPORT, PGUSER, PGDATABASE, ...).
//
// Request:  POST /payments  {"amount": 1250, "currency": "EUR"}   (amount in minor units)
// Headers:  Idempotency-Key (required), X-Tenant (the account; here simply trusted)
// Test knobs in the body: "sleep": seconds to hold the transaction open,
// "fail_once": true to fail the first attempt of a key after its INSERT.

import http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';

const AMOUNT_LIMIT = 1_000_000; // above it a payment is declined: a final error, replayed like a success
const MAX_BODY_BYTES = 64 * 1024;

const pool = new pg.Pool({ max: 10 });

// keys whose injected failure has happened; lives in memory like a flaky downstream service would
const failedKeys = new Set();

class HttpError extends Error {
  constructor(status, message, headers = {}) {
    super(message);
    this.status = status;
    this.headers = headers;
  }
}

class TransientError extends Error {}

// jsonb keeps neither key order nor whitespace, so a fresh response and its replay are
// serialised the same way, and the replay is byte-identical
function sortKeys(value) {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(Object.keys(value).sort().map((k) => [k, sortKeys(value[k])]));
}

const encode = (body) => JSON.stringify(sortKeys(body));

function parse(text) {
  let req;
  try {
    req = JSON.parse(text);
  } catch {
    throw new HttpError(400, 'body is not JSON');
  }
  if (req === null || typeof req !== 'object' || Array.isArray(req)) {
    throw new HttpError(400, 'body must be a JSON object');
  }
  const { amount, currency, sleep: seconds = 0 } = req;
  if (!Number.isSafeInteger(amount) || amount <= 0) {
    throw new HttpError(400, 'amount must be a positive integer (minor units)');
  }
  if (typeof currency !== 'string' || !/^[A-Z]{3}$/.test(currency)) {
    throw new HttpError(400, 'currency must be a three-letter code such as EUR');
  }
  if (typeof seconds !== 'number' || !(seconds >= 0 && seconds <= 5)) {
    throw new HttpError(400, 'sleep must be between 0 and 5 seconds');
  }
  return req;
}

function injectFailure(tenant, key) {
  const id = JSON.stringify([tenant, key]);
  if (failedKeys.has(id)) return false;
  failedKeys.add(id);
  return true;
}

// Returns {status, body, headers}. Runs inside the transaction opened by createPayment.
async function handle(client, tenant, key, text, req) {
  // the hash is computed from the raw body, so key order, whitespace and number spelling of a
  // retry do not matter
  const {
    rows: [claim],
  } = await client.query(
    `SELECT outcome, fence, response_code, response_body
       FROM idem_claim($1, $2, idem_request_hash('POST', '/payments', $3::jsonb))`,
    [tenant, key, text],
  );
  const { outcome, fence } = claim;

  if (outcome === 'completed' || outcome === 'failed') {
    return { status: claim.response_code, body: claim.response_body, headers: { 'Idempotent-Replayed': 'true' } };
  }
  if (outcome === 'in_progress') {
    return { status: 409, body: { error: 'a request with this key is in progress' }, headers: { 'Retry-After': '1' } };
  }
  if (outcome === 'mismatch') {
    return { status: 422, body: { error: 'this key was used with a different request' } };
  }
  if (outcome !== 'claimed') {
    // stale_key, with pg_idem.reject_stale_uuidv7 on
    return { status: 422, body: { error: `key refused: ${outcome}` } };
  }

  await sleep((req.sleep ?? 0) * 1000);

  if (req.amount > AMOUNT_LIMIT) {
    const body = { error: 'amount_over_limit', limit: AMOUNT_LIMIT };
    await client.query('SELECT idem_fail_final($1, $2, $3, 402, $4)', [tenant, key, fence, body]);
    return { status: 402, body };
  }

  const {
    rows: [payment],
  } = await client.query(
    'INSERT INTO payments (tenant, idem_key, amount, currency) VALUES ($1, $2, $3, $4) RETURNING id',
    [tenant, key, req.amount, req.currency],
  );

  if (req.fail_once && injectFailure(tenant, key)) {
    throw new TransientError('downstream timed out');
  }

  // pg returns bigint as a string, which keeps ids past 2^53 exact
  const body = { payment_id: payment.id, amount: req.amount, currency: req.currency };
  // nobody can take the key over before this transaction commits; should idem_complete refuse
  // all the same (55000), the error rolls the payment back with it
  await client.query('SELECT idem_complete($1, $2, $3, 201, $4)', [tenant, key, fence, body]);
  return { status: 201, body };
}

async function createPayment(tenant, key, text, req) {
  const client = await pool.connect();
  let broken;
  try {
    await client.query('BEGIN');
    const result = await handle(client, tenant, key, text, req);
    // the response goes out only after the commit: a client never sees an effect that may vanish
    await client.query('COMMIT');
    return result;
  } catch (err) {
    // a claim that is rolled back vanishes, so the client's retry is claimed afresh
    broken = await client.query('ROLLBACK').then(() => undefined, (e) => e);
    throw err;
  } finally {
    client.release(broken);
  }
}

async function readBody(request) {
  const chunks = [];
  let size = 0;
  for await (const chunk of request) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'body too large');
    chunks.push(chunk);
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new HttpError(400, 'body is not UTF-8');
  }
}

async function respond(request) {
  if (request.method !== 'POST' || request.url !== '/payments') {
    return { status: 404, body: { error: 'not found' } };
  }
  const key = request.headers['idempotency-key'];
  const tenant = request.headers['x-tenant'];
  if (!key) return { status: 400, body: { error: 'Idempotency-Key header required' } };
  if (!tenant) return { status: 400, body: { error: 'X-Tenant header required' } };
  try {
    const text = await readBody(request);
    return await createPayment(tenant, key, text, parse(text));
  } catch (err) {
    if (err instanceof HttpError) return { status: err.status, body: { error: err.message }, headers: err.headers };
    if (err instanceof TransientError) {
      return { status: 503, body: { error: err.message }, headers: { 'Retry-After': '1' } };
    }
    if (err.code === '55000') {
      return { status: 409, body: { error: 'lost the key to another attempt' }, headers: { 'Retry-After': '1' } };
    }
    // class 22, data exception: a key or tenant too long, a body jsonb refuses, ...
    if (typeof err.code === 'string' && err.code.startsWith('22')) {
      return { status: 400, body: { error: err.message } };
    }
    console.error(err);
    return { status: 500, body: { error: 'internal error' } };
  }
}

const server = http.createServer(async (request, response) => {
  const { status, body, headers = {} } = await respond(request);
  const data = encode(body);
  response.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(data),
    ...headers,
  });
  response.end(data);
});

await pool.query(
  `CREATE TABLE IF NOT EXISTS payments (
     id bigserial PRIMARY KEY, tenant text NOT NULL, idem_key text NOT NULL,
     amount numeric NOT NULL, currency text NOT NULL)`,
);
server.listen(Number(process.argv[2] ?? 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
