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

const NEVER_STORED = new Set(defaults.never_stored_headers);

/**
 * The lower-cased allow-list of stored headers. A name of `never_stored_headers` is a
 * configuration error (a replay goes to whoever holds the key: a cookie or credential in it would
 * be handed to another caller), refused here, when the route is configured.
 */
function allowList(names) {
  const list = (names || defaults.stored_headers).map((n) => String(n).toLowerCase());
  const refused = list.filter((n) => NEVER_STORED.has(n));
  if (refused.length) {
    throw new TypeError(`pg-idem-http: storedHeaders may not name ${refused.join(', ')}: these headers are never stored nor replayed`);
  }
  return new Set(list);
}

/**
 * Builds the envelope (a JS object, JSON.stringify it for `$5::jsonb`) of a response.
 * headers: [name, value] pairs or an object; body: Buffer | string | null.
 */
function buildEnvelope(headers, body, storedHeaders) {
  const keep = storedHeaders instanceof Set ? storedHeaders : allowList(storedHeaders);
  const stored = {};
  // each value in the order the response had it: a name given twice (pairs) or an array (Node's
  // getHeader of an appended header) keeps every value, never joined
  for (const [name, value] of headerPairs(headers)) {
    const lower = name.toLowerCase();
    if (!keep.has(lower) || NEVER_STORED.has(lower) || value === undefined || value === null) continue;
    const values = (Array.isArray(value) ? value : [value]).map(String);
    stored[lower] = (stored[lower] || []).concat(values);
  }
  const bytes = toBuffer(body);
  // jsonb holds any valid UTF-8 text but U+0000; anything else travels as base64
  if (isUtf8(bytes) && !bytes.includes(0)) return { http: 2, headers: stored, body: bytes.toString('utf8') };
  return { http: 2, headers: stored, body_base64: bytes.toString('base64') };
}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** An envelope's version (1 or 2, or another number: refused), or null when it is none. */
function envelopeVersion(value) {
  if (!isObject(value) || !('http' in value) || !isObject(value.headers)) return null;
  if (typeof value.body !== 'string' && typeof value.body_base64 !== 'string') return null;
  return value.http;
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
    const version = envelopeVersion(parsed);
    if (version !== null) {
      if (version !== 1 && version !== 2) throw new Error(`pg-idem-http: a stored envelope of http ${JSON.stringify(version)} cannot be replayed`);
      // http 1: one string per name; http 2: an array of values in order. A never-stored name
      // (written by hand) is not replayed.
      for (const [name, value] of Object.entries(parsed.headers)) {
        if (NEVER_STORED.has(name.toLowerCase())) continue;
        for (const v of version === 1 ? [value] : [].concat(value)) headers.push([name, String(v)]);
      }
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

/** The statement `name` of contract.json with `{schema}` replaced by the located schema. */
function statement(name, schema, fields) {
  const text = name === 'claim' ? claimSql(fields) : sql[name];
  return text.split('{schema}').join(schema);
}

/** quote_ident's rule: as is when lower-case letters, digits and `_` (not first a digit). */
function quoteIdent(name) {
  const text = String(name);
  if (/^[a-z_][a-z0-9_]*$/.test(text)) return text;
  return `"${text.replace(/"/g, '""')}"`;
}

/** Whether an installed version (`idem_version()`) is at least `min_pg_idem_version`. */
function versionOk(installed, minimum = contract.min_pg_idem_version) {
  const parse = (v) => {
    const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(String(v));
    return m ? m.slice(1).map(Number) : null;
  };
  const have = parse(installed);
  const need = parse(minimum);
  if (!have) return false;
  for (let i = 0; i < 3; i += 1) if (have[i] !== need[i]) return have[i] > need[i];
  return true;
}

const UNRESERVED = /[A-Za-z0-9\-._~]/;
const RESERVED = ":/?#[]@!$&'()*+,;=";

/** RFC 3986 6.2.2 on one part (path or query), as octets. */
function normalizePart(bytes) {
  let out = '';
  const hex = (b) => `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  const isHex = (b) => (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
  for (let i = 0; i < bytes.length; i += 1) {
    const b = bytes[i];
    if (b === 0x25) {
      if (i + 2 < bytes.length && isHex(bytes[i + 1]) && isHex(bytes[i + 2])) {
        const value = parseInt(String.fromCharCode(bytes[i + 1], bytes[i + 2]), 16);
        const ch = String.fromCharCode(value);
        out += value < 0x80 && UNRESERVED.test(ch) ? ch : hex(value);
        i += 2;
      } else {
        out += '%25';
      }
      continue;
    }
    const ch = String.fromCharCode(b);
    out += b < 0x80 && (UNRESERVED.test(ch) || RESERVED.includes(ch)) ? ch : hex(b);
  }
  return out;
}

/**
 * The request target as the fingerprint binds it ($10): the raw target received (Express's
 * req.originalUrl, Fastify's request.raw.url: never a decoded path), path and query normalised
 * separately; `?` only before a non-empty query.
 */
function normalizeTarget(received) {
  const raw = Buffer.from(String(received), 'utf8');
  const q = raw.indexOf(0x3f);
  const path = normalizePart(q < 0 ? raw : raw.subarray(0, q));
  const query = q < 0 ? '' : normalizePart(raw.subarray(q + 1));
  return query ? `${path}?${query}` : path;
}

/** `/orders/:id` (Express, Fastify) -> `/orders/{id}` (the contract's route template). */
function routeTemplate(path) {
  return String(path).replace(/:([A-Za-z0-9_]+)/g, '{$1}');
}

/** [name, value] pairs -> Map(name -> [values]) in order, names compared case-insensitively. */
function groupHeaders(pairs) {
  const groups = new Map();
  const names = new Map();
  for (const [name, value] of headerPairs(pairs)) {
    const lower = name.toLowerCase();
    if (!names.has(lower)) names.set(lower, name);
    const key = names.get(lower);
    groups.set(key, (groups.get(key) || []).concat(Array.isArray(value) ? value.map(String) : [String(value)]));
  }
  return groups;
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
  statement,
  quoteIdent,
  versionOk,
  normalizeTarget,
  allowList,
  routeTemplate,
  groupHeaders,
  toBuffer,
};
