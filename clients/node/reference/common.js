'use strict';
// What the Express and Fastify reference apps share (clients/CONTRACT.md "The reference apps"):
// arguments, the pool, the tables, body validation and the response templates of contract.json.
const { parseArgs } = require('node:util');
const pg = require('pg');
const { contract, locate, outcomeCounts } = require('..');

const ref = contract.reference_app;

function options() {
  const { values } = parseArgs({ options: { dsn: { type: 'string' }, port: { type: 'string', default: '0' } } });
  if (!values.dsn) throw new Error('usage: --dsn postgresql://... --port PORT');
  return { dsn: values.dsn, port: Number(values.port) };
}

function pool(dsn) {
  const p = new pg.Pool({ connectionString: dsn, max: 20 });
  // an idle client whose connection breaks must not crash the process
  p.on('error', (err) => console.error('idle client:', err.message));
  return p;
}

async function createTables(p) {
  // DDL in an explicit transaction too, as everything behind a transaction pooler
  const client = await p.connect();
  try {
    await client.query('BEGIN');
    // CONTRACT.md "The reference apps": the apps' lock, then the tables (named with their schema)
    for (const statement of ref.tables) await client.query(statement);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/** Refuses to start when pg_idem is missing, overloaded or too old (before listening). */
const checkPgIdem = (p) => locate(p);

// The package's options shared by every route; /payouts adds the lease (lease mode). The tenant
// hook: the X-Tenant header (a real app takes it from its auth); missing, the package answers
// 400 tenant_missing before any claim.
function packageOptions(p) {
  return {
    pool: p,
    tenant: (req) => req.headers['x-tenant'],
    storedHeaders: ref.stored_headers,
    statementTimeoutMs: ref.statement_timeout_ms,
    idleInTransactionTimeoutMs: ref.idle_in_transaction_timeout_ms,
  };
}
const payoutLease = ref.payout_lease;
// `/orders/{order_id}/pay` as Express and Fastify write it
const orderRoute = ref.order_route.replace(/\{(\w+)\}/g, ':$1');

/** GET /_pg_idem/outcomes: every outcome's count since the app started. */
const outcomesResponse = () => ({
  status: 200,
  headers: [['Content-Type', 'application/json']],
  body: Buffer.from(JSON.stringify(outcomeCounts())),
});

/** [[name, value]] -> Map(name -> [values]): a name given twice (Link) is sent as two lines. */
function groupHeaders(pairs) {
  const grouped = new Map();
  for (const [name, value] of pairs) grouped.set(name, [...(grouped.get(name) || []), value]);
  return grouped;
}

/** The parsed body, or null when it is not a JSON object with an integer amount. */
function validate(body) {
  if (body === null || typeof body !== 'object' || Array.isArray(body) || Buffer.isBuffer(body)) return null;
  if (!Number.isSafeInteger(body.amount)) return null;
  return body;
}

const badRequest = Buffer.from(
  JSON.stringify({ error: 'bad_request', message: 'The body must be a JSON object with an integer "amount".' }),
);

// templates filled in as text, so 9007199254740993 and 12.50 survive
function fill(template, values) {
  let out = template;
  for (const [name, value] of Object.entries(values)) out = out.split(`{${name}}`).join(String(value));
  return Buffer.from(out, 'utf8');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Number.isFinite(ms) && ms > 0 ? ms : 0));

// (tenant, key) pairs whose injected transient failure has happened in this process
const failedOnce = new Set();
function failTransientlyOnce(tenant, key) {
  const id = JSON.stringify([tenant, key]);
  if (failedOnce.has(id)) return false;
  failedOnce.add(id);
  return true;
}

const json = [['Content-Type', 'application/json']];

/**
 * The handlers, framework-neutral: each returns {status, headers: [[name, value]], body}. idem
 * is req.idem / request.idem.
 */
async function payment(idem, body) {
  const input = validate(body);
  if (!input) return { status: 400, headers: json, body: badRequest };
  if (input.fail === 'final') {
    return { status: 402, headers: json, body: fill(ref.declined_json, { amount: input.amount }) };
  }
  const {
    rows: [row],
  } = await idem.client.query('INSERT INTO public.payments (tenant, idem_key, amount) VALUES ($1, $2, $3) RETURNING id', [
    idem.tenant,
    idem.key,
    input.amount,
  ]);
  await sleep(Number(input.sleep_ms));
  if (input.fail === 'transient' && failTransientlyOnce(idem.tenant, idem.key)) {
    throw new Error('injected transient failure');
  }
  if (input.commit === 'api') idem.client.commit(); // refused by the package: throws, 500
  if (input.commit === 'sql') await idem.client.query('COMMIT'); // caught by the txid guard: 500
  const values = { id: row.id, amount: input.amount };
  const headers = [['Location', `/payments/${row.id}`]];
  if (input.set_cookie === true) headers.push(['Set-Cookie', ref.cookie]);
  if (input.links === true) for (const link of ref.links) headers.push(['Link', link]);
  if (input.format === 'text') {
    return { status: 201, headers: [['Content-Type', 'text/plain; charset=utf-8'], ...headers], body: fill(ref.payment_text, values) };
  }
  return { status: 201, headers: [...json, ...headers], body: fill(ref.payment_json, values) };
}

async function orderPayment(idem, orderId, body) {
  const input = validate(body);
  if (!input) return { status: 400, headers: json, body: badRequest };
  const {
    rows: [row],
  } = await idem.client.query('INSERT INTO public.payments (tenant, idem_key, amount, order_id) VALUES ($1, $2, $3, $4) RETURNING id', [
    idem.tenant,
    idem.key,
    input.amount,
    orderId,
  ]);
  return {
    status: 201,
    headers: [...json, ['Location', `/payments/${row.id}`]],
    body: fill(ref.payment_json, { id: row.id, amount: input.amount }),
  };
}

async function payout(idem, body) {
  const input = validate(body);
  if (!input) return { status: 400, headers: json, body: badRequest };
  const bankRef = await idem.downstreamKey('bank');
  if (input.heartbeat === true) await idem.heartbeat(); // by the route's lease
  await sleep(Number(input.sleep_ms)); // the "external call", outside any transaction
  const client = await idem.begin(); // the completion transaction, under the fence
  const {
    rows: [row],
  } = await client.query('INSERT INTO public.payouts (tenant, idem_key, amount, attempt) VALUES ($1, $2, $3, $4) RETURNING id', [
    idem.tenant,
    idem.key,
    input.amount,
    idem.attempt,
  ]);
  return {
    status: 201,
    headers: [...json, ['Location', `/payouts/${row.id}`]],
    body: fill(ref.payout_json, { id: row.id, amount: input.amount, attempt: idem.attempt, bank_ref: bankRef }),
  };
}

module.exports = {
  options,
  pool,
  createTables,
  checkPgIdem,
  packageOptions,
  payoutLease,
  orderRoute,
  outcomesResponse,
  groupHeaders,
  payment,
  orderPayment,
  payout,
};
