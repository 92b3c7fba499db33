'use strict';
// pg-idem-http: exactly-once HTTP handlers on PostgreSQL with pg_idem (clients/CONTRACT.md).
// Neither Express nor Fastify is required here: the glue only uses what the framework hands it.
const core = require('./lib/core');
const { idempotency, idempotencyErrors } = require('./lib/express');
const { pgIdemHttp } = require('./lib/fastify');
const { resolveOptions, locate, start, Attempt } = require('./lib/engine');
const transaction = require('./lib/transaction');
const outcomes = require('./lib/outcomes');

module.exports = {
  // Express 5
  idempotency,
  idempotencyErrors,
  // Fastify 5
  pgIdemHttp,
  // once per pool: pg_idem's schema and version (throws PgIdemSetupError: do not start)
  locate,
  // bring your own transaction
  claim: transaction.claim,
  complete: transaction.complete,
  locateOn: transaction.locateOn,
  fromKnex: transaction.fromKnex,
  PgIdemSetupError: transaction.PgIdemSetupError,
  TransactionEndedError: transaction.TransactionEndedError,
  // outcomes: counts, and the diagnostics_channel name they are published on
  outcomeCounts: outcomes.outcomeCounts,
  OUTCOME_CHANNEL: outcomes.CHANNEL,
  // framework-neutral
  resolveOptions,
  start,
  Attempt,
  // the pure contract
  contract: core.contract,
  parseKey: core.parseKey,
  isFinalStatus: core.isFinalStatus,
  normalizeTarget: core.normalizeTarget,
  buildEnvelope: core.buildEnvelope,
  replayResponse: core.replayResponse,
  errorBody: core.errorBody,
  errorResponse: core.errorResponse,
  errorResponseFor: core.errorResponseFor,
  errorNameForSqlstate: core.errorNameForSqlstate,
  sqlstateOf: core.sqlstateOf,
  claimSql: core.claimSql,
  routeTemplate: core.routeTemplate,
  versionOk: core.versionOk,
};
