'use strict';
// pg-idem-http: exactly-once HTTP handlers on PostgreSQL with pg_idem (clients/CONTRACT.md).
// Neither Express nor Fastify is required here: the glue only uses what the framework hands it.
const core = require('./lib/core');
const { idempotency, idempotencyErrors } = require('./lib/express');
const { pgIdemHttp } = require('./lib/fastify');
const { resolveOptions, start, Attempt } = require('./lib/engine');

module.exports = {
  // Express 5
  idempotency,
  idempotencyErrors,
  // Fastify 5
  pgIdemHttp,
  // framework-neutral
  resolveOptions,
  start,
  Attempt,
  // the pure contract
  contract: core.contract,
  parseKey: core.parseKey,
  isFinalStatus: core.isFinalStatus,
  buildEnvelope: core.buildEnvelope,
  replayResponse: core.replayResponse,
  errorBody: core.errorBody,
  errorResponse: core.errorResponse,
  errorNameForSqlstate: core.errorNameForSqlstate,
  sqlstateOf: core.sqlstateOf,
  claimSql: core.claimSql,
  routeTemplate: core.routeTemplate,
};
