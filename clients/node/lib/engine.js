'use strict';
// The framework-neutral part: claims a key on a pg.Pool, and settles the attempt with the
// handler's response (complete / fail_final + COMMIT, or ROLLBACK / release). The Express and
// Fastify glue only capture requests and responses as {status, headers, body: Buffer}.
const core = require('./core');
const { record } = require('./outcomes');
const { locateOn, checkRequest, reject, claim, store, TransactionEndedError, PgIdemSetupError } = require('./transaction');
const { handleFor } = require('./handle');

const { defaults } = core.contract;

/**
 * Per-route options merged over the contract's defaults. Refuses, at configuration, a route
 * without a tenant (a `tenant` hook, or `singleTenant` naming the one tenant every caller
 * shares), both at once, and a stored-header allow-list naming a never-stored header.
 */
function resolveOptions(options = {}) {
  if (!options.pool || typeof options.pool.connect !== 'function') {
    throw new TypeError('pg-idem-http: options.pool must be a pg.Pool');
  }
  const hook = options.tenant;
  const single = options.singleTenant;
  if (hook !== undefined && hook !== null && typeof hook !== 'function') {
    throw new TypeError('pg-idem-http: options.tenant must be a function (req) => tenant');
  }
  if (hook && single !== undefined && single !== null) {
    throw new TypeError('pg-idem-http: give either a tenant hook or singleTenant, not both');
  }
  if (!hook && (typeof single !== 'string' || single === '')) {
    throw new TypeError(
      'pg-idem-http: a tenant is required: options.tenant = (req) => the caller\'s tenant from your auth, ' +
        "or singleTenant: 'name' when every caller shares one namespace",
    );
  }
  const storedHeaders = options.storedHeaders ?? defaults.stored_headers;
  return {
    pool: options.pool,
    schema: options.schema ?? null,
    method: options.method ? String(options.method).toUpperCase() : undefined,
    route: options.route ? core.routeTemplate(options.route) : undefined,
    required: options.required !== false,
    ttl: options.ttl ?? null,
    lease: options.lease ?? null,
    fields: options.fields ? [...options.fields] : null,
    tenant: hook || (() => single),
    singleTenant: hook ? null : single,
    keyHeader: options.keyHeader ?? defaults.key_header,
    replayHeader: options.replayHeader ?? defaults.replay_header,
    storedHeaders,
    allow: core.allowList(storedHeaders), // throws on a never-stored name
    statementTimeoutMs: options.statementTimeoutMs ?? defaults.statement_timeout_ms,
    idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs ?? defaults.idle_in_transaction_timeout_ms,
    retryAfterSeconds: options.retryAfterSeconds ?? defaults.retry_after_seconds,
    limit: options.limit ?? core.contract.defaults.max_body_bytes,
    log: options.log ?? ((err) => console.error('pg-idem-http:', err)),
  };
}

// pool -> Map(schema option -> Promise<{schema, version}>): located once per pool
const located = new WeakMap();

/**
 * pg_idem's schema and version for a pool, found once (in a short transaction of its own) and
 * remembered; a failure is not remembered (the database may come back), a PgIdemSetupError says
 * the application must not start: await it before listening (the Fastify plugin does on ready).
 */
function locate(pool, { schema = null } = {}) {
  if (!located.has(pool)) located.set(pool, new Map());
  const byOption = located.get(pool);
  const id = schema ?? '';
  if (!byOption.has(id)) {
    const promise = shortTransaction(pool, (conn) => locateOn(conn, { schema }));
    byOption.set(id, promise);
    promise.catch(() => byOption.delete(id));
  }
  return byOption.get(id);
}

/**
 * A checked-out pg client, watched: a connection that breaks while the handler holds it emits
 * 'error' (e.g. the server ended an idle transaction), which would crash the process unhandled;
 * it is recorded instead, and the client is destroyed on release rather than pooled again.
 */
class Conn {
  static async open(pool) {
    const conn = new Conn(await pool.connect());
    return conn;
  }

  constructor(client) {
    this.client = client;
    this.lost = null;
    this.onError = (err) => {
      this.lost = this.lost || err;
    };
    this.onEnd = () => {
      this.lost = this.lost || new Error('the database connection ended');
    };
    client.on('error', this.onError);
    client.on('end', this.onEnd);
  }

  async query(text, params) {
    try {
      // never a `name`: unnamed statements work behind PgBouncer in transaction mode
      return await this.client.query(text, params);
    } catch (err) {
      if (!core.sqlstateOf(err)) this.lost = this.lost || err;
      throw err;
    }
  }

  async commit() {
    const result = await this.query('COMMIT');
    // COMMIT of a transaction a swallowed error aborted answers ROLLBACK, without an error
    if (result.command !== 'COMMIT') {
      throw Object.assign(new Error('COMMIT rolled back: the transaction was aborted'), { code: '25P02', severity: 'ERROR' });
    }
  }

  async rollback() {
    if (this.lost) return;
    try {
      await this.query('ROLLBACK');
    } catch (err) {
      this.lost = this.lost || err;
    }
  }

  release() {
    this.client.removeListener('error', this.onError);
    this.client.removeListener('end', this.onEnd);
    this.client.release(this.lost || undefined);
  }
}

/** Runs fn(conn) in a short transaction of its own (checkpoint, heartbeat, release, ...). */
async function shortTransaction(pool, fn) {
  const conn = await Conn.open(pool);
  try {
    await conn.query('BEGIN');
    const result = await fn(conn);
    await conn.commit();
    return result;
  } catch (err) {
    await conn.rollback();
    throw err;
  } finally {
    conn.release();
  }
}

/**
 * Starts a request: checks tenant and key, claims it. Returns {response} to send at once (an
 * error, a replay, in_progress, ...) or {attempt} whose handler is to run.
 * input: {method, route, target (raw request target), keyHeader (raw value or undefined),
 * tenant (the hook's answer), body (Buffer)}
 */
async function start(cfg, input) {
  const method = (cfg.method || input.method).toUpperCase();
  const route = cfg.route || input.route;
  const details = { method, route };
  const checked = checkRequest({ tenant: input.tenant, keyHeader: input.keyHeader, required: cfg.required }, details);
  if (checked.response) return { response: checked.response };
  const { tenant, key } = checked;
  if (key === undefined) {
    // an optional key that is missing: a plain transaction, no claim (and no outcome)
    const attempt = new Attempt(cfg, { mode: 'plain', tenant, key: null });
    if (!cfg.lease) {
      // transaction-mode handlers use req.idem.client right away
      try {
        await attempt.begin();
      } catch (err) {
        return { response: attempt.errorFor(err) };
      }
    }
    return { attempt };
  }

  let conn;
  let result;
  try {
    const { schema } = await locate(cfg.pool, { schema: cfg.schema });
    conn = await Conn.open(cfg.pool);
    await conn.query('BEGIN');
    result = await claim(conn, {
      schema,
      tenant,
      method,
      route,
      target: input.target,
      keyHeader: input.keyHeader,
      body: input.body,
      fields: cfg.fields,
      ttl: cfg.ttl,
      lease: cfg.lease,
      statementTimeoutMs: cfg.statementTimeoutMs,
      idleInTransactionTimeoutMs: cfg.idleInTransactionTimeoutMs,
      retryAfterSeconds: cfg.retryAfterSeconds,
      replayHeader: cfg.replayHeader,
    });
  } catch (err) {
    if (!conn) record('database_error', { ...details, tenant, key }); // claim() counts its own
    if (conn) {
      await conn.rollback();
      conn.release();
    }
    if (err instanceof PgIdemSetupError) {
      cfg.log(err); // the application should not have started: a 500, not a 503 to retry
      return { response: core.errorResponse('internal_error') };
    }
    return { response: errorFor(cfg, err) };
  }

  if (result.outcome === 'claimed') {
    const c = result.claim;
    if (!cfg.lease) return { attempt: new Attempt(cfg, { mode: 'transaction', claim: c, conn }) };
    // lease mode: the claim is committed at once, so others see it and its lease
    try {
      await conn.commit();
    } catch (err) {
      await conn.rollback();
      record('database_error', { ...details, tenant, key });
      return { response: errorFor(cfg, err) };
    } finally {
      conn.release();
    }
    return { attempt: new Attempt(cfg, { mode: 'lease', claim: c }) };
  }
  // every other outcome changes nothing
  await conn.rollback();
  conn.release();
  return { response: result.response };
}

function errorFor(cfg, err) {
  const response = core.errorResponseFor(err, cfg.retryAfterSeconds);
  if (response.status === 500) cfg.log(err);
  return response;
}

const isLeaseLost = (err) => core.sqlstateOf(err) === '55000';

/** One claimed (or key-less) request between its claim and its response. */
class Attempt {
  constructor(cfg, { mode, tenant, key, claim, conn }) {
    this.cfg = cfg;
    this.mode = mode;
    this.claim = claim || null;
    this.tenant = claim ? claim.tenant : tenant;
    this.key = claim ? claim.key : key;
    this.scopedKey = claim ? claim.scopedKey : null;
    this.fence = claim ? claim.fence : null;
    this.attemptNo = claim ? claim.attempt : null;
    this.checkpointPhase = claim ? claim.checkpointPhase : null;
    this.checkpointData = claim ? claim.checkpointData : null;
    this.details = claim ? { method: claim.method, route: claim.route, tenant: claim.tenant, key: claim.key } : null;
    this.conn = conn || null;
    this.handle = conn ? handleFor(conn.client) : null;
    this.override = null; // an error response that replaces whatever the handler answers
    this.overrideOutcome = null;
    this.settled = false;
    this.downstream = new Map();
    this.ctx = this.buildContext();
  }

  /** Records the request's final outcome (a claimed one only: plain requests have none). */
  outcome(name, status) {
    if (this.details) record(name, { ...this.details, status });
  }

  errorFor(err) {
    return errorFor(this.cfg, err);
  }

  /** The object handlers see as req.idem / request.idem. */
  buildContext() {
    const self = this;
    const ctx = {
      mode: this.mode,
      tenant: this.tenant,
      key: this.key,
      scopedKey: this.scopedKey,
      fence: this.fence,
      attempt: this.attemptNo,
      checkpointPhase: this.checkpointPhase,
      checkpointData: this.checkpointData,
      // the handle: query() on the transaction's connection; commit, rollback and release throw
      get client() {
        return self.conn ? self.handle : null;
      },
      begin: () => this.begin(),
      transaction: () => this.begin(),
      downstreamKey: (step) => this.downstreamKey(step),
      checkpoint: (phase, data) => this.checkpoint(phase, data),
      heartbeat: (lease) => this.heartbeat(lease),
    };
    return ctx;
  }

  /**
   * The transaction the handler writes in. Transaction mode: the claim's. Lease mode: the
   * completion transaction, opened here under the fence (assert_fence locks the key; 55000 when
   * another attempt took it over).
   */
  async begin() {
    if (this.settled) throw new Error('pg-idem-http: the response was already settled');
    if (this.conn) return this.handle;
    this.conn = await this.open();
    this.handle = handleFor(this.conn.client);
    return this.handle;
  }

  async open() {
    let conn;
    try {
      conn = await Conn.open(this.cfg.pool);
      await conn.query('BEGIN');
      if (this.mode === 'lease') await conn.query(core.statement('assert_fence', this.claim.schema), [this.tenant, this.scopedKey, this.fence]);
    } catch (err) {
      if (conn) {
        await conn.rollback();
        conn.release();
      }
      this.noteError(err);
      throw err;
    }
    return conn;
  }

  // errors that decide the answer whatever the handler makes of them
  // (lost: the connection broke, whatever the SQLSTATE of its last words, e.g. 25P03)
  noteError(err, lost = false) {
    if (this.override) return;
    const retryAfter = this.cfg.retryAfterSeconds;
    if (isLeaseLost(err) && this.mode === 'lease') {
      this.override = core.errorResponse('lease_lost', { retryAfter });
      this.overrideOutcome = 'lease_lost';
    } else if (lost || !core.sqlstateOf(err)) {
      this.override = core.errorResponse('unavailable', { retryAfter });
      this.overrideOutcome = 'database_error';
    }
  }

  requireLease(what) {
    if (this.mode !== 'lease') throw new Error(`pg-idem-http: ${what} needs a claimed key in lease mode`);
  }

  async leaseCall(text, params) {
    try {
      return await shortTransaction(this.cfg.pool, (conn) => conn.query(text, params));
    } catch (err) {
      if (isLeaseLost(err)) this.noteError(err);
      throw err;
    }
  }

  async downstreamKey(step) {
    if (!this.scopedKey) throw new Error('pg-idem-http: downstreamKey needs a claimed key');
    const name = String(step);
    if (!this.downstream.has(name)) {
      // a short transaction, as every statement behind a transaction pooler
      const promise = shortTransaction(this.cfg.pool, (conn) => conn.query(core.statement('downstream_key', this.claim.schema), [this.tenant, this.scopedKey, name]));
      this.downstream.set(name, promise.then((r) => Object.values(r.rows[0])[0]));
      promise.catch(() => this.downstream.delete(name));
    }
    return this.downstream.get(name);
  }

  async checkpoint(phase, data) {
    this.requireLease('checkpoint');
    const json = data === undefined || data === null ? null : JSON.stringify(data);
    await this.leaseCall(core.statement('checkpoint', this.claim.schema), [this.tenant, this.scopedKey, this.fence, phase, json]);
  }

  async heartbeat(lease) {
    this.requireLease('heartbeat');
    const { rows } = await this.leaseCall(core.statement('heartbeat', this.claim.schema), [this.tenant, this.scopedKey, this.fence, lease ?? this.cfg.lease]);
    return rows[0] ? Object.values(rows[0])[0] : null; // the new lease_expires_at
  }

  /**
   * Settles with the handler's response {status, headers, body} (exception: the handler threw;
   * the response is then the framework's error response). Returns the response to send, which
   * is sent only now: after COMMIT for a stored one.
   */
  async settle(response, exception) {
    if (this.settled) return response;
    this.settled = true;
    const conn = this.conn;
    this.conn = null;
    const final = !exception && !this.override && core.isFinalStatus(response.status);
    try {
      if (final) return await this.store(conn, response);
      if (conn) await conn.rollback();
      if (conn && conn.lost) this.noteError(conn.lost, true);
      if (this.mode === 'lease' && !(this.override && this.override.status === 409)) await this.releaseKey();
      const out = this.override || response;
      this.outcome(this.overrideOutcome || 'rolled_back', out.status);
      return out;
    } finally {
      if (conn) conn.release();
    }
  }

  async store(conn, response) {
    let opened = null;
    try {
      if (!conn && this.mode !== 'plain') conn = opened = await this.open();
      if (conn && conn.lost) {
        this.noteError(conn.lost, true);
        throw conn.lost;
      }
      // transaction mode: guarded by the claim's txid; lease mode: the claim committed long ago,
      // the fence guards the completion transaction
      if (this.mode !== 'plain') await store(conn, this.claim, response, this.cfg.allow, this.mode === 'lease' ? null : this.claim.txid);
      if (conn) await conn.commit();
      this.outcome('stored', response.status);
      return response;
    } catch (err) {
      if (conn) await conn.rollback();
      if (err instanceof TransactionEndedError) {
        this.cfg.log(err); // an error of the handler's code: it must be seen
        this.outcome('transaction_ended', err.response.status);
        return err.response;
      }
      this.noteError(err, Boolean(conn && conn.lost));
      if (this.mode === 'lease' && !isLeaseLost(err)) await this.releaseKey();
      const out = this.override || this.errorFor(err);
      this.outcome(this.overrideOutcome || 'database_error', out.status);
      return out;
    } finally {
      if (opened) opened.release();
    }
  }

  /** Gives a lease-mode key up under the fence, so the client's retry is claimed at once. */
  async releaseKey() {
    if (this.mode !== 'lease') return;
    try {
      await shortTransaction(this.cfg.pool, (conn) => conn.query(core.statement('release', this.claim.schema), [this.tenant, this.scopedKey, this.fence]));
    } catch (err) {
      // lost already, or the database is away: the lease expires by itself
      if (!isLeaseLost(err)) this.cfg.log(err);
    }
  }

  /** The request ended without a response passing through settle (aborted): clean up. */
  async abandon() {
    if (this.settled) return;
    await this.settle({ status: 500, headers: [], body: Buffer.alloc(0) }, new Error('abandoned'));
  }
}

module.exports = { resolveOptions, locate, start, reject, Attempt, Conn };
