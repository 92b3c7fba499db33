'use strict';
// A stand-in for pg.Pool: records every statement and answers them from a script, so the
// engine's transaction handling can be checked without a server.
const { EventEmitter } = require('node:events');

class FakeClient extends EventEmitter {
  constructor(pool, id) {
    super();
    this.pool = pool;
    this.id = id;
    this.released = undefined;
  }

  async query(text, params) {
    if (typeof text !== 'string') throw new Error('only (text, params): never a query object with a name');
    this.pool.log.push({ client: this.id, text, params });
    const answer = await this.pool.answer(text, params, this);
    return answer || { command: text.split(' ')[0].toUpperCase(), rows: [] };
  }

  release(err) {
    this.released = err === undefined ? 'pooled' : err;
    this.pool.releases.push({ client: this.id, err });
  }
}

class FakePool {
  // answer(text, params, client) -> {rows, command} | undefined; may throw
  constructor(answer) {
    this.answer = answer;
    this.log = [];
    this.releases = [];
    this.clients = [];
  }

  async connect() {
    const client = new FakeClient(this, this.clients.length);
    this.clients.push(client);
    return client;
  }

  statements() {
    return this.log.map(({ text }) => (text.startsWith('SELECT a.scoped_key') ? 'claim' : text));
  }
}

/** A claim row as the claim statement returns it. */
function claimRow(outcome, extra = {}) {
  return {
    scoped_key: 'POST /payments k1',
    outcome,
    fence: '42',
    attempt: 1,
    response_code: null,
    response_body: null,
    checkpoint_phase: null,
    checkpoint_data: null,
    retry_after: null,
    ...extra,
  };
}

/** A pg DatabaseError look-alike. */
function dbError(code, message = `error ${code}`) {
  return Object.assign(new Error(message), { code, severity: 'ERROR' });
}

module.exports = { FakePool, claimRow, dbError };
