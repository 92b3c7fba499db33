'use strict';
// The framework-neutral part: claims a key on a pg.Pool, and settles the attempt with the
// handler's response (complete / fail_final + COMMIT, or ROLLBACK / release). The Express and
// Fastify glue only capture requests and responses as {status, headers, body: Buffer}.
const core = require('./core');

const { defaults, sql } = core.contract;

/** Per-route options merged over the contract's defaults. */
function resolveOptions(options = {}) {
  if (!options.pool || typeof options.pool.connect !== 'function') {
    throw new TypeError('pg-idem-http: options.pool must be a pg.Pool');
  }
  return {
    pool: options.pool,
    method: options.method ? String(options.method).toUpperCase() : undefined,
    route: options.route,
    required: options.required !== false,
    ttl: options.ttl ?? null,
    lease: options.lease ?? null,
    fields: options.fields ? [...options.fields] : null,
    tenant: options.tenant,
    keyHeader: options.keyHeader ?? defaults.key_header,
    replayHeader: options.replayHeader ?? defaults.replay_header,
    storedHeaders: options.storedHeaders ?? defaults.stored_headers,
    statementTimeoutMs: options.statementTimeoutMs ?? defaults.statement_timeout_ms,
    idleInTransactionTimeoutMs: options.idleInTransactionTimeoutMs ?? defaults.idle_in_transaction_timeout_ms,
    retryAfterSeconds: options.retryAfterSeconds ?? defaults.retry_after_seconds,
    limit: options.limit ?? core.contract.defaults.max_body_bytes,
    log: options.log ?? ((err) => console.error('pg-idem-http:', err)),
  };
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
 * Starts a request: parses the key, claims it. Returns {response} to send at once (an error, a
 * replay, in_progress, ...) or {attempt} whose handler is to run.
 * input: {method, route, keyHeader (raw header value or undefined), tenant, body (Buffer)}
 */
async function start(cfg, input) {
  const key = core.parseKey(input.keyHeader);
  if (key === null) return { response: core.errorResponse('key_invalid') };
  const tenant = input.tenant === undefined || input.tenant === null ? defaults.tenant : String(input.tenant);
  const method = (cfg.method || input.method).toUpperCase();
  const route = cfg.route || input.route;
  if (key === undefined) {
    if (cfg.required) return { response: core.errorResponse('key_missing') };
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

  const params = [
    tenant,
    method,
    route,
    key,
    core.toBuffer(input.body),
    cfg.lease,
    cfg.ttl,
    String(cfg.statementTimeoutMs),
    String(cfg.idleInTransactionTimeoutMs),
  ];
  if (cfg.fields) params.push(cfg.fields);

  let conn;
  let row;
  try {
    conn = await Conn.open(cfg.pool);
    await conn.query('BEGIN');
    ({
      rows: [row],
    } = await conn.query(core.claimSql(cfg.fields), params));
  } catch (err) {
    if (conn) {
      await conn.rollback();
      conn.release();
    }
    return { response: errorFor(cfg, err) };
  }

  if (row.outcome === 'claimed') {
    if (!cfg.lease) return { attempt: new Attempt(cfg, { mode: 'transaction', tenant, key, row, conn }) };
    // lease mode: the claim is committed at once, so others see it and its lease
    try {
      await conn.commit();
    } catch (err) {
      await conn.rollback();
      return { response: errorFor(cfg, err) };
    } finally {
      conn.release();
    }
    return { attempt: new Attempt(cfg, { mode: 'lease', tenant, key, row }) };
  }

  // every other outcome changes nothing
  await conn.rollback();
  conn.release();
  switch (row.outcome) {
    case 'completed':
    case 'failed':
      return { response: core.replayResponse(row.response_code, row.response_body, cfg.replayHeader) };
    case 'in_progress':
      return { response: core.errorResponse('in_progress', { retryAfter: row.retry_after ?? cfg.retryAfterSeconds }) };
    case 'mismatch':
      return { response: core.errorResponse('mismatch') };
    case 'stale_key':
      return { response: core.errorResponse('stale_key') };
    default:
      cfg.log(new Error(`unexpected claim outcome ${row.outcome}`));
      return { response: core.errorResponse('internal_error') };
  }
}

function errorFor(cfg, err) {
  const response = core.errorResponseFor(err, cfg.retryAfterSeconds);
  if (response.status === 500) cfg.log(err);
  return response;
}

const isLeaseLost = (err) => core.sqlstateOf(err) === '55000';

/** One claimed (or key-less) request between its claim and its response. */
class Attempt {
  constructor(cfg, { mode, tenant, key, row, conn }) {
    this.cfg = cfg;
    this.mode = mode;
    this.tenant = tenant;
    this.key = key;
    this.scopedKey = row ? row.scoped_key : null;
    this.fence = row ? row.fence : null; // int8 as the string pg returns: passed back as is
    this.attemptNo = row ? row.attempt : null;
    this.checkpointPhase = row ? row.checkpoint_phase : null;
    this.checkpointData = row && row.checkpoint_data !== null ? JSON.parse(row.checkpoint_data) : null;
    this.conn = conn || null;
    this.override = null; // an error response that replaces whatever the handler answers
    this.settled = false;
    this.downstream = new Map();
    this.ctx = this.buildContext();
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
      get client() {
        return self.conn ? self.conn.client : null;
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
    if (this.conn) return this.conn.client;
    this.conn = await this.open();
    return this.conn.client;
  }

  async open() {
    let conn;
    try {
      conn = await Conn.open(this.cfg.pool);
      await conn.query('BEGIN');
      if (this.mode === 'lease') await conn.query(sql.assert_fence, [this.tenant, this.scopedKey, this.fence]);
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
    if (isLeaseLost(err) && this.mode === 'lease') this.override = core.errorResponse('lease_lost', { retryAfter });
    else if (lost || !core.sqlstateOf(err)) this.override = core.errorResponse('unavailable', { retryAfter });
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
      const promise = shortTransaction(this.cfg.pool, (conn) => conn.query(sql.downstream_key, [this.tenant, this.scopedKey, name]));
      this.downstream.set(name, promise.then((r) => Object.values(r.rows[0])[0]));
      promise.catch(() => this.downstream.delete(name));
    }
    return this.downstream.get(name);
  }

  async checkpoint(phase, data) {
    this.requireLease('checkpoint');
    const json = data === undefined || data === null ? null : JSON.stringify(data);
    await this.leaseCall(sql.checkpoint, [this.tenant, this.scopedKey, this.fence, phase, json]);
  }

  async heartbeat(lease) {
    this.requireLease('heartbeat');
    const { rows } = await this.leaseCall(sql.heartbeat, [this.tenant, this.scopedKey, this.fence, lease ?? this.cfg.lease]);
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
      return this.override || response;
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
      if (this.mode !== 'plain') {
        const envelope = JSON.stringify(core.buildEnvelope(response.headers, response.body, this.cfg.storedHeaders));
        const statement = response.status < 400 ? sql.complete : sql.fail_final;
        await conn.query(statement, [this.tenant, this.scopedKey, this.fence, response.status, envelope]);
      }
      if (conn) await conn.commit();
      return response;
    } catch (err) {
      if (conn) await conn.rollback();
      this.noteError(err, Boolean(conn && conn.lost));
      if (this.mode === 'lease' && !isLeaseLost(err)) await this.releaseKey();
      return this.override || this.errorFor(err);
    } finally {
      if (opened) opened.release();
    }
  }

  /** Gives a lease-mode key up under the fence, so the client's retry is claimed at once. */
  async releaseKey() {
    if (this.mode !== 'lease') return;
    try {
      await shortTransaction(this.cfg.pool, (conn) => conn.query(sql.release, [this.tenant, this.scopedKey, this.fence]));
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

module.exports = { resolveOptions, start, Attempt, Conn };
