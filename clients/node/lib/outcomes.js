'use strict';
// Every request's outcome (contract.json `outcomes`): counted in this process and published on
// the diagnostics_channel CHANNEL, Node's standard channel for a library's events (subscribe
// with diagnostics_channel.subscribe('pg-idem-http:outcome', fn)). Publishing costs nothing
// while nobody subscribes.
const diagnostics = require('node:diagnostics_channel');
const { outcomes: NAMES } = require('./contract');

const CHANNEL = 'pg-idem-http:outcome';
const channel = diagnostics.channel(CHANNEL);
const counts = new Map(NAMES.map((name) => [name, 0]));

/** Counts one outcome and publishes {outcome, ...details} (method, route, tenant, key, status). */
function record(outcome, details = {}) {
  if (!counts.has(outcome)) throw new Error(`pg-idem-http: unknown outcome ${outcome}`);
  counts.set(outcome, counts.get(outcome) + 1);
  if (channel.hasSubscribers) channel.publish({ outcome, ...details });
}

/** Every outcome name with its count since the process started: {claimed: 3, replayed: 1, ...}. */
function outcomeCounts() {
  return Object.fromEntries(counts);
}

module.exports = { CHANNEL, record, outcomeCounts };
