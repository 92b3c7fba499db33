'use strict';
// A real PostgreSQL with pg_idem for the HTTP tests: PG_IDEM_NODE_TEST_DSN (test.sh starts a
// throwaway server and sets it). Without it the tests that need a database are skipped.
const crypto = require('node:crypto');
const http = require('node:http');
const pg = require('pg');

const DSN = process.env.PG_IDEM_NODE_TEST_DSN || null;
const skip = DSN ? false : 'no PostgreSQL with pg_idem: PG_IDEM_NODE_TEST_DSN is unset (test.sh sets it)';

function newPool(dsn = DSN) {
  const pool = new pg.Pool({ connectionString: dsn, max: 8 });
  pool.on('error', () => {});
  return pool;
}

/** Runs sql with params on a fresh connection, autocommit: for set-up and inspection. */
async function sql(text, params = [], dsn = DSN) {
  const client = new pg.Client({ connectionString: dsn });
  await client.connect();
  try {
    return (await client.query(text, params)).rows;
  } finally {
    await client.end();
  }
}

/** A database of its own (dropped by the returned function), without pg_idem. */
async function scratchDatabase() {
  const name = `node_${crypto.randomBytes(4).toString('hex')}`;
  await sql(`CREATE DATABASE ${name}`);
  const dsn = DSN.replace(/\/[^/?]*(\?|$)/, `/${name}$1`);
  return { dsn, drop: () => sql(`DROP DATABASE ${name} WITH (FORCE)`) };
}

const fresh = () => crypto.randomUUID();

/** A request over loopback with node:http: {status, headers (raw pairs, in order), body}. */
function request(port, method, path, { headers = {}, body } = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const pairs = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2) pairs.push([res.rawHeaders[i].toLowerCase(), res.rawHeaders[i + 1]]);
        resolve({ status: res.statusCode, headers: pairs, body: Buffer.concat(chunks).toString('utf8') });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const values = (response, name) => response.headers.filter(([n]) => n === name).map(([, v]) => v);

/** POST JSON with a key and a tenant (either may be undefined). */
function post(port, path, json, { key, tenant, headers = {} } = {}) {
  const all = { 'content-type': 'application/json', ...headers };
  if (key !== undefined) all['idempotency-key'] = key;
  if (tenant !== undefined) all['x-tenant'] = tenant;
  return request(port, 'POST', path, { headers: all, body: JSON.stringify(json) });
}

async function createTables() {
  await sql('CREATE TABLE IF NOT EXISTS node_payments (id bigserial PRIMARY KEY, tenant text, idem_key text, amount bigint, order_id bigint)');
}

module.exports = { DSN, skip, newPool, sql, scratchDatabase, fresh, request, values, post, createTables };
