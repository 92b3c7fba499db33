'use strict';
// The pure part of the contract: no I/O, no framework. Everything is derived from contract.json.
const { isUtf8 } = require('node:buffer');
const contract = require('./contract');

const { defaults, errors, sqlstates, sql } = contract;

// Structured Field string: printable ASCII, only \" and \\ escapes. Bare: visible ASCII, no '"'.
const SF_STRING = /^"((?:[\x20\x21\x23-\x5B\x5D-\x7E]|\\["\\])*)"$/;
const BARE = /^[\x21\x23-\x7E]+$/;

/**
 * Parses an Idempotency-Key header value. Returns the key, or null when it is present but empty,
 * malformed or too long (400 key_invalid). `undefined` in, `undefined` out (no header: key_missing).
 */
function parseKey(header) {
  if (header === undefined) return undefined;
  if (Array.isArray(header)) header = header.join(', ');
  const value = String(header).replace(/^[ \t]+|[ \t]+$/g, '');
  let key;
  if (value.startsWith('"')) {
    const m = SF_STRING.exec(value);
    if (!m) return null;
    key = m[1].replace(/\\(["\\])/g, '$1');
  } else {
    if (!BARE.test(value)) return null;
    key = value;
  }
  // ASCII only, so string length is the character count
  if (key.length === 0 || key.length > defaults.max_key_length) return null;
  return key;
}

/** Whether a status is final (stored and replayed) or retryable (rolled back). */
function isFinalStatus(status) {
  const { from, to, except } = defaults.final_status;
  return status >= from && status <= to && !except.includes(status);
}

/** The lower-cased names of a response's headers to keep in the envelope. */
function allowList(names) {
  return new Set((names || defaults.stored_headers).map((n) => n.toLowerCase()));
}

/**
 * Builds the envelope (a JS object, JSON.stringify it for `$5::jsonb`) of a response.
 * headers: [name, value] pairs or an object; body: Buffer | string | null.
 */
function buildEnvelope(headers, body, storedHeaders) {
  const keep = allowList(storedHeaders);
  const stored = {};
  for (const [name, value] of headerPairs(headers)) {
    const lower = name.toLowerCase();
    if (keep.has(lower) && value !== undefined) stored[lower] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  const bytes = toBuffer(body);
  // jsonb holds any valid UTF-8 text but U+0000; anything else travels as base64
  if (isUtf8(bytes) && !bytes.includes(0)) return { http: 1, headers: stored, body: bytes.toString('utf8') };
  return { http: 1, headers: stored, body_base64: bytes.toString('base64') };
}

function isEnvelope(value) {
  return (
    value !== null && typeof value === 'object' && !Array.isArray(value) && value.http === 1 &&
    value.headers !== null && typeof value.headers === 'object' && !Array.isArray(value.headers) &&
    (typeof value.body === 'string' || typeof value.body_base64 === 'string')
  );
}

/**
 * The response to replay for a stored (completed or failed) key: {status, headers: [[n, v]], body}.
 * responseBody is the jsonb as text (the claim statement casts it, so numbers are not re-parsed).
 */
function replayResponse(responseCode, responseBody, replayHeader = defaults.replay_header) {
  let headers = [];
  let body = Buffer.alloc(0);
  if (responseBody !== null && responseBody !== undefined) {
    let parsed;
    try {
      parsed = JSON.parse(responseBody);
    } catch {
      parsed = undefined;
    }
    if (isEnvelope(parsed)) {
      headers = Object.entries(parsed.headers).map(([n, v]) => [n, String(v)]);
      body = typeof parsed.body === 'string' ? Buffer.from(parsed.body, 'utf8') : Buffer.from(parsed.body_base64, 'base64');
    } else {
      // written by hand-written SQL: the jsonb's own text, as JSON
      headers = [['content-type', 'application/json']];
      body = Buffer.from(responseBody, 'utf8');
    }
  }
  headers.push([replayHeader, defaults.replay_header_value]);
  return { status: Number(responseCode ?? 200), headers, body };
}

/** The error body's exact bytes: compact, "error" then "message". */
function errorBody(name, message) {
  let text = message === undefined || message === null ? errors[name].message : message;
  if (text === null) text = ''; // invalid_request without a database message: keep the key
  return Buffer.from(JSON.stringify({ error: name, message: text }), 'utf8');
}

/** A complete error response of the contract: {status, headers, body}. */
function errorResponse(name, { message, retryAfter } = {}) {
  const spec = errors[name];
  const headers = [['content-type', 'application/json']];
  if (spec.retry_after) headers.push(['retry-after', String(retryAfter ?? defaults.retry_after_seconds)]);
  return { status: spec.status, headers, body: errorBody(name, spec.message === null ? message : undefined) };
}

/** The error name of a SQLSTATE: first matching prefix; none (connection lost) is unavailable. */
function errorNameForSqlstate(sqlstate) {
  if (!sqlstate) return 'unavailable';
  for (const [prefix, name] of sqlstates) if (sqlstate.startsWith(prefix)) return name;
  return 'internal_error';
}

/**
 * The SQLSTATE of an error from node-postgres, or null when there is none (a lost or refused
 * connection, a timeout of the driver). Duck-typed: a DatabaseError has a severity and a 5-char code
 * (a Node system error such as EPIPE has a code too, but no severity).
 */
function sqlstateOf(err) {
  if (err && typeof err.severity === 'string' && typeof err.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code)) {
    return err.code;
  }
  return null;
}

/** The error response for an error raised by a database call. */
function errorResponseFor(err, retryAfter) {
  const name = errorNameForSqlstate(sqlstateOf(err));
  return errorResponse(name, { message: err && err.message, retryAfter });
}

/** The claim statement with the fingerprint expression of the route's mode. */
function claimSql(fields) {
  return sql.claim.replace('{fingerprint}', fields ? sql.fingerprint_fields : sql.fingerprint_body);
}

/** `/orders/:id` (Express, Fastify) -> `/orders/{id}` (the contract's route template). */
function routeTemplate(path) {
  return String(path).replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

function headerPairs(headers) {
  if (!headers) return [];
  if (Array.isArray(headers)) return headers;
  return Object.entries(headers);
}

function toBuffer(body) {
  if (body === null || body === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(body)) return body;
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return Buffer.from(String(body), 'utf8');
}

module.exports = {
  contract,
  parseKey,
  isFinalStatus,
  buildEnvelope,
  replayResponse,
  errorBody,
  errorResponse,
  errorNameForSqlstate,
  sqlstateOf,
  errorResponseFor,
  claimSql,
  routeTemplate,
  toBuffer,
};
