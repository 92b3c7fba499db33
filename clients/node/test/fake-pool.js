'use strict';
// A stand-in for pg.Pool: records every statement and answers them from a script, so the
// engine's mapping of database answers and failures (a lost connection, a COMMIT answering
// ROLLBACK, 55000 at each step) can be checked without a server. HTTP is tested against real
// frameworks and PostgreSQL (http.test.js), never on this.
const { EventEmitter } = require('node:events');
const core = require('../lib/core');

const { sql } = core.contract;
// the contract's statement names, by their text with the located schema (`public` here)
const NAMES = new Map(Object.keys(sql).map((name) => [core.statement(name, 'public'), name]));

class FakeClient extends EventEmitter {
  constructor(pool, id) {
    super();
    this.pool = pool;
    this.id = id;
    this.released = undefined;
  }

  async query(text, params) {
    if (typeof text !== 'string') throw new Error('only (text, params): never a query object with a name');
    // the locate transaction (once per pool) is set apart: the tests look at the requests'
    if (text === sql.locate) {
      this.pool.setup.add(this.id);
      return { command: 'SELECT', rows: [{ schema: 'public', foreign_functions: null }] };
    }
    if (NAMES.get(text) === 'version') return { command: 'SELECT', rows: [{ version: core.contract.min_pg_idem_version }] };
    this.pool.allLog.push({ client: this.id, text, params });
    const answer = this.pool.setup.has(this.id) ? undefined : await this.pool.answer(text, params, this);
    // complete / fail_final return their row unless the script says otherwise
    if (!answer && (NAMES.get(text) === 'complete' || NAMES.get(text) === 'fail_final')) return { command: 'SELECT', rows: [{ done: 'now' }] };
    return answer || { command: text.split(' ')[0].toUpperCase(), rows: [] };
  }

  release(err) {
    this.released = err === undefined ? 'pooled' : err;
    this.pool.allReleases.push({ client: this.id, err });
  }
}

class FakePool {
  // answer(text, params, client) -> {rows, command} | undefined; may throw
  constructor(answer) {
    this.answer = answer;
    this.allLog = [];
    this.allReleases = [];
    this.allClients = [];
    this.setup = new Set();
  }

  get log() {
    return this.allLog.filter(({ client }) => !this.setup.has(client));
  }

  get releases() {
    return this.allReleases.filter(({ client }) => !this.setup.has(client));
  }

  get clients() {
    return this.allClients.filter(({ id }) => !this.setup.has(id));
  }

  async connect() {
    const client = new FakeClient(this, this.allClients.length);
    this.allClients.push(client);
    return client;
  }

  /** The statements run, by contract name (`claim`, `complete`, ...) or their text (BEGIN, ...). */
  statements() {
    return this.log.map(({ text }) => (text.startsWith('SELECT a.scoped_key') ? 'claim' : NAMES.get(text) || text));
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
    txid: '1000',
    ...extra,
  };
}

/** A pg DatabaseError look-alike. */
function dbError(code, message = `error ${code}`) {
  return Object.assign(new Error(message), { code, severity: 'ERROR' });
}

module.exports = { FakePool, claimRow, dbError };
