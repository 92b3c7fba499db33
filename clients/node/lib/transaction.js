'use strict';
// Bring your own transaction: pg_idem's claim and completion on a connection the caller holds
// inside its own transaction (node-postgres client, or Knex through fromKnex), and the HTTP
// mapping of their answers. The Express and Fastify glue are built on these same functions.
const core = require('./core');
const { record } = require('./outcomes');

const { defaults, sql } = core.contract;

/** pg_idem cannot be used from this database: the application must not start. */
class PgIdemSetupError extends Error {}
PgIdemSetupError.prototype.name = 'PgIdemSetupError';

/** The completion found the claim's transaction ended (the handler sent COMMIT or ROLLBACK). */
class TransactionEndedError extends Error {
  constructor() {
    super("pg-idem-http: the claim's transaction was ended by the handler (COMMIT or ROLLBACK sent as SQL): nothing was stored");
    this.response = core.errorResponse('internal_error');
  }
}
TransactionEndedError.prototype.name = 'TransactionEndedError';

/**
 * Finds pg_idem's schema (sql.locate, or the `schema` option quoted as quote_ident would) and
 * checks its version, on db (anything with node-postgres's query(text, values)), in the caller's
 * transaction. Throws PgIdemSetupError when pg_idem is missing, overloaded by another role's
 * functions, or older than min_pg_idem_version. Returns {schema, version}.
 */
async function locateOn(db, { schema } = {}) {
  let quoted;
  if (schema) {
    quoted = core.quoteIdent(schema);
  } else {
    const { rows } = await db.query(sql.locate, []);
    if (!rows.length) {
      throw new PgIdemSetupError('pg-idem-http: pg_idem is not installed in this database: CREATE EXTENSION pg_idem (or install its SQL edition) first');
    }
    if (rows[0].foreign_functions) {
      throw new PgIdemSetupError(`pg-idem-http: pg_idem's schema ${rows[0].schema} holds functions another role planted: ${rows[0].foreign_functions}; drop them`);
    }
    quoted = rows[0].schema;
  }
  let version;
  try {
    ({ rows: [{ version }] } = await db.query(core.statement('version', quoted), []));
  } catch (err) {
    // no idem_version(): a pg_idem from before it (the released 0.5.0 and older)
    if (core.sqlstateOf(err) !== '42883') throw err;
    throw new PgIdemSetupError(`pg-idem-http: the pg_idem installed has no idem_version(): it is older than ${core.contract.min_pg_idem_version}, which this package needs: ALTER EXTENSION pg_idem UPDATE (or install the SQL edition again)`);
  }
  if (!core.versionOk(version)) {
    throw new PgIdemSetupError(`pg-idem-http: pg_idem ${version} is installed; this package needs ${core.contract.min_pg_idem_version} or later: ALTER EXTENSION pg_idem UPDATE`);
  }
  return { schema: quoted, version };
}

/**
 * Checks what needs no database: the tenant (null, undefined or '' is 400 tenant_missing, there
 * is no default), then the key header. Returns {tenant, key} (key undefined: no header) or
 * {response} (outcome `rejected` recorded).
 */
function checkRequest({ tenant, keyHeader, required = true }, details = {}) {
  if (tenant === undefined || tenant === null || tenant === '') return reject('tenant_missing', details);
  const key = core.parseKey(keyHeader);
  if (key === null) return reject('key_invalid', details);
  if (key === undefined && required) return reject('key_missing', details);
  return { tenant: String(tenant), key };
}

/** An error response of the contract sent before any claim, counted as `rejected`. */
function reject(name, details = {}) {
  record('rejected', { ...details, error: name });
  return { response: core.errorResponse(name) };
}

/**
 * Claims the key of one request in the caller's open transaction on db. request: {schema (from
 * locate), tenant, method, route (template, `{name}` or `:name`), target (the raw request target),
 * keyHeader (the raw header value), body (Buffer), fields?, ttl?, lease?, statementTimeoutMs?,
 * idleInTransactionTimeoutMs?, retryAfterSeconds?, replayHeader?}.
 * Returns {outcome: 'claimed', claim} (run the handler, then complete() before COMMIT), or
 * {outcome, response}: send that response after a ROLLBACK. Database errors are thrown (map them
 * with errorResponseFor).
 */
async function claim(db, request) {
  const method = String(request.method).toUpperCase();
  const route = core.routeTemplate(request.route);
  const details = { method, route };
  const checked = checkRequest({ ...request, required: true }, details);
  if (checked.response) return { outcome: 'rejected', response: checked.response };
  const { tenant, key } = checked;
  Object.assign(details, { tenant, key });
  const params = [
    tenant,
    method,
    route,
    key,
    core.toBuffer(request.body),
    request.lease ?? null,
    request.ttl ?? null,
    String(request.statementTimeoutMs ?? defaults.statement_timeout_ms),
    String(request.idleInTransactionTimeoutMs ?? defaults.idle_in_transaction_timeout_ms),
    core.normalizeTarget(request.target),
  ];
  // $11, the field list, exists in fields mode only: PostgreSQL refuses a value it does not use
  if (request.fields) params.push([...request.fields]);
  let row;
  try {
    ({ rows: [row] } = await db.query(core.statement('claim', request.schema, request.fields), params));
  } catch (err) {
    record('database_error', details);
    throw err;
  }
  const retryAfter = request.retryAfterSeconds ?? defaults.retry_after_seconds;
  switch (row.outcome) {
    case 'claimed':
      record('claimed', details);
      return {
        outcome: 'claimed',
        claim: {
          schema: request.schema,
          tenant,
          key,
          method,
          route,
          scopedKey: row.scoped_key,
          fence: row.fence, // int8 as the string pg returns: passed back as is
          attempt: row.attempt,
          txid: row.txid, // the claim's transaction: complete() checks it is still the same
          checkpointPhase: row.checkpoint_phase,
          checkpointData: row.checkpoint_data === null ? null : JSON.parse(row.checkpoint_data),
        },
      };
    case 'completed':
    case 'failed':
      record('replayed', { ...details, status: row.response_code });
      return { outcome: 'replayed', response: core.replayResponse(row.response_code, row.response_body, request.replayHeader) };
    case 'in_progress':
      record('in_progress', details);
      return { outcome: 'in_progress', response: core.errorResponse('in_progress', { retryAfter: row.retry_after ?? retryAfter }) };
    case 'mismatch':
      record('mismatch', details);
      return { outcome: 'mismatch', response: core.errorResponse('mismatch') };
    case 'stale_key':
      record('rejected', { ...details, error: 'stale_key' });
      return { outcome: 'rejected', response: core.errorResponse('stale_key') };
    default:
      record('database_error', details);
      throw new Error(`pg-idem-http: unexpected claim outcome ${row.outcome}`);
  }
}

/**
 * Stores a final response with its claim, in the claim's transaction (before the caller's
 * COMMIT): complete (status < 400) or fail_final (4xx), guarded by the claim's txid. Throws
 * TransactionEndedError when the transaction is not the claim's any more; database errors as
 * they come. Uncounted: complete() below and the framework glue count.
 */
async function store(db, claim, response, storedHeaders, txid = claim.txid) {
  const allow = storedHeaders instanceof Set ? storedHeaders : core.allowList(storedHeaders);
  const envelope = JSON.stringify(core.buildEnvelope(response.headers, response.body, allow));
  const name = response.status < 400 ? 'complete' : 'fail_final';
  const { rows } = await db.query(core.statement(name, claim.schema), [
    claim.tenant,
    claim.scopedKey,
    claim.fence,
    response.status,
    envelope,
    txid ?? null,
  ]);
  if (!rows.length) throw new TransactionEndedError();
}

/**
 * The public completion: stores {status, headers, body} (a final status: see isFinalStatus) in
 * the caller's transaction; commit it afterwards, and send the response only once it committed.
 * Records `stored`, `transaction_ended` or `database_error`.
 */
async function complete(db, claim, response, { storedHeaders } = {}) {
  const details = { method: claim.method, route: claim.route, tenant: claim.tenant, key: claim.key, status: response.status };
  try {
    await store(db, claim, response, storedHeaders);
  } catch (err) {
    record(err instanceof TransactionEndedError ? 'transaction_ended' : 'database_error', details);
    throw err;
  }
  record('stored', details);
}

/**
 * Knex (pg driver) as a db for claim/complete/locate: runs the contract's `$n` statements
 * through trx.raw, whose placeholders are `?` in order (the statements hold no `?` of their own).
 */
function fromKnex(trx) {
  return {
    query(text, values = []) {
      if (text.includes('?')) throw new Error('pg-idem-http: fromKnex cannot pass a statement holding "?"');
      const bindings = [];
      const positional = text.replace(/\$(\d+)/g, (_, n) => {
        bindings.push(values[Number(n) - 1]);
        return '?';
      });
      return trx.raw(positional, bindings);
    },
  };
}

module.exports = { PgIdemSetupError, TransactionEndedError, locateOn, checkRequest, reject, claim, store, complete, fromKnex };
