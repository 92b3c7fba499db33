'use strict';
// pg-idem-http: exactly-once HTTP handlers on PostgreSQL with pg_idem (clients/CONTRACT.md).
// Neither Express nor Fastify is required here: the glue only uses what the framework hands it.
// Each export is an `exports.name =` of its own, so that Node finds the names when an ES module
// imports this CommonJS file (import { idempotency } from 'pg-idem-http').
const core = require('./lib/core');
const { idempotency, idempotencyErrors } = require('./lib/express');
const { pgIdemHttp } = require('./lib/fastify');
const { resolveOptions, locate, start, Attempt } = require('./lib/engine');
const transaction = require('./lib/transaction');
const outcomes = require('./lib/outcomes');

// Express 5
exports.idempotency = idempotency;
exports.idempotencyErrors = idempotencyErrors;
// Fastify 5
exports.pgIdemHttp = pgIdemHttp;
// once per pool: pg_idem's schema and version (throws PgIdemSetupError: do not start)
exports.locate = locate;
// bring your own transaction
exports.claim = transaction.claim;
exports.complete = transaction.complete;
exports.locateOn = transaction.locateOn;
exports.fromKnex = transaction.fromKnex;
exports.PgIdemSetupError = transaction.PgIdemSetupError;
exports.TransactionEndedError = transaction.TransactionEndedError;
// outcomes: counts, and the diagnostics_channel name they are published on
exports.outcomeCounts = outcomes.outcomeCounts;
exports.OUTCOME_CHANNEL = outcomes.CHANNEL;
// framework-neutral
exports.resolveOptions = resolveOptions;
exports.start = start;
exports.Attempt = Attempt;
// the pure contract
exports.contract = core.contract;
exports.parseKey = core.parseKey;
exports.isFinalStatus = core.isFinalStatus;
exports.normalizeTarget = core.normalizeTarget;
exports.buildEnvelope = core.buildEnvelope;
exports.replayResponse = core.replayResponse;
exports.errorBody = core.errorBody;
exports.errorResponse = core.errorResponse;
exports.errorResponseFor = core.errorResponseFor;
exports.errorNameForSqlstate = core.errorNameForSqlstate;
exports.sqlstateOf = core.sqlstateOf;
exports.claimSql = core.claimSql;
exports.routeTemplate = core.routeTemplate;
exports.versionOk = core.versionOk;
