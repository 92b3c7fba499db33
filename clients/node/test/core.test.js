'use strict';
// The contract's vectors against the pure functions.
const test = require('node:test');
const assert = require('node:assert/strict');
const core = require('../lib/core');

const { contract } = core;
const { vectors, errors, sqlstates, defaults } = contract;

test('key header vectors', () => {
  for (const { header, key } of vectors.key_header) {
    assert.equal(core.parseKey(header), key, `header ${JSON.stringify(header)}`);
  }
});

test('a missing header is not an invalid one', () => {
  assert.equal(core.parseKey(undefined), undefined);
  assert.equal(core.parseKey(['a', 'b']), null); // duplicated: "a, b" has a space
});

test('final status vectors', () => {
  for (const { status, final } of vectors.final_status) assert.equal(core.isFinalStatus(status), final, `status ${status}`);
});

test('envelope vectors: response in, envelope out (http 2, every value in order)', () => {
  for (const v of vectors.envelope) {
    const envelope = core.buildEnvelope(v.headers, Buffer.from(v.body_base64, 'base64'), v.stored_headers);
    assert.deepEqual(envelope, v.envelope);
  }
});

test('envelope vectors: replay is the inverse', () => {
  for (const v of vectors.envelope) {
    // as the claim statement returns it: jsonb's text
    const replay = core.replayResponse(v.status, JSON.stringify(v.envelope));
    assert.equal(replay.status, v.status);
    assert.ok(replay.body.equals(Buffer.from(v.body_base64, 'base64')));
    const expected = Object.entries(v.envelope.headers).flatMap(([n, values]) => values.map((x) => [n, x]));
    expected.push([defaults.replay_header, defaults.replay_header_value]);
    assert.deepEqual(replay.headers, expected);
  }
});

test('replay vectors: http 1 and 2, each value a line of its own, never-stored names dropped', () => {
  for (const v of vectors.replay) {
    const replay = core.replayResponse(v.response_code, v.response_body);
    assert.equal(replay.status, v.response_code, v.about);
    assert.deepEqual(replay.headers, [...v.headers, [defaults.replay_header, defaults.replay_header_value]], v.about);
    assert.equal(replay.body.toString('base64'), v.body_base64, v.about);
  }
});

test('an envelope of another http version is refused, not replayed', () => {
  assert.throws(() => core.replayResponse(200, '{"http": 3, "headers": {}, "body": ""}'), /http 3/);
});

test('Node header values: an array (appended header) keeps every value in order', () => {
  const env = core.buildEnvelope([['link', ['<a>', '<b>']], ['Link', '<c>']], '', ['link']);
  assert.deepEqual(env.headers, { link: ['<a>', '<b>', '<c>'] });
});

test('never-stored headers: refused in the allow-list at configuration, whatever the case', () => {
  for (const name of defaults.never_stored_headers) {
    assert.throws(() => core.allowList(['content-type', name.toUpperCase()]), new RegExp(name));
  }
  assert.deepEqual([...core.allowList(['ETag'])], ['etag']);
});

test('request target vectors', () => {
  for (const { received, target } of vectors.request_target) {
    assert.equal(core.normalizeTarget(received), target, `received ${JSON.stringify(received)}`);
  }
});

test('version vectors', () => {
  for (const { installed, ok } of vectors.version) assert.equal(core.versionOk(installed), ok, installed);
});

test('schema option quoted as quote_ident does', () => {
  assert.equal(core.quoteIdent('public'), 'public');
  assert.equal(core.quoteIdent('_x9'), '_x9');
  assert.equal(core.quoteIdent('My"Schema'), '"My""Schema"');
  assert.equal(core.quoteIdent('9a'), '"9a"');
  assert.equal(core.quoteIdent('a-b'), '"a-b"');
});

test('statements: {schema} replaced everywhere, nothing through search_path', () => {
  for (const name of Object.keys(contract.sql)) {
    if (name.startsWith('fingerprint_')) continue;
    const text = core.statement(name, '"s"', ['amount']);
    assert.ok(!text.includes('{schema}') && !text.includes('{fingerprint}'), name);
    for (const m of text.matchAll(/(\S*)idem_\w+\(/g)) assert.ok(m[1].endsWith('"s".') || m[1].endsWith('pg_catalog.'), `${name}: ${m[0]}`);
  }
});

test('legacy replay vectors', () => {
  for (const v of vectors.legacy_replay) {
    const replay = core.replayResponse(200, v.response_body);
    assert.equal(replay.body.toString('utf8'), v.body);
    const type = replay.headers.find(([n]) => n === 'content-type');
    assert.equal(type ? type[1] : null, v.content_type);
    assert.deepEqual(replay.headers.at(-1), [defaults.replay_header, defaults.replay_header_value]);
  }
});

test('the replay header name is configurable', () => {
  const replay = core.replayResponse(201, null, 'X-Replayed');
  assert.deepEqual(replay.headers, [['X-Replayed', 'true']]);
});

test('error bodies: exact bytes, fixed messages, JSON-escaped database messages', () => {
  for (const [name, spec] of Object.entries(errors)) {
    if (spec.message === null) continue;
    const bytes = core.errorBody(name).toString('utf8');
    assert.equal(bytes, `{"error":"${name}","message":"${spec.message.replace(/["\\]/g, '\\$&')}"}`);
  }
  const r = core.errorResponse('invalid_request', { message: 'key "x\\y" too long\n' });
  assert.equal(r.status, 400);
  assert.equal(r.body.toString(), '{"error":"invalid_request","message":"key \\"x\\\\y\\" too long\\n"}');
  assert.equal(core.errorResponse('invalid_request').body.toString(), '{"error":"invalid_request","message":""}');
});

test('error responses: status, content type, Retry-After where the contract says', () => {
  for (const [name, spec] of Object.entries(errors)) {
    const r = core.errorResponse(name, { message: 'm' });
    assert.equal(r.status, spec.status);
    assert.deepEqual(r.headers[0], ['content-type', 'application/json']);
    const retry = r.headers.find(([n]) => n === 'retry-after');
    assert.equal(Boolean(retry), Boolean(spec.retry_after), name);
    if (retry) assert.equal(retry[1], String(defaults.retry_after_seconds));
  }
  const held = core.errorResponse('in_progress', { retryAfter: 7 });
  assert.deepEqual(held.headers[1], ['retry-after', '7']);
});

test('SQLSTATE mapping: first matching prefix, none is unavailable, others internal_error', () => {
  for (const [prefix, name] of sqlstates) {
    assert.equal(core.errorNameForSqlstate(prefix.padEnd(5, '0')), name, prefix);
  }
  const cases = {
    55000: 'lease_lost',
    42501: 'forbidden',
    54000: 'invalid_request',
    22001: 'invalid_request',
    22004: 'invalid_request',
    57014: 'unavailable',
    '25P03': 'unavailable',
    '57P01': 'unavailable',
    '08006': 'unavailable',
    23505: 'internal_error',
    '25P02': 'internal_error',
    '42P01': 'internal_error',
  };
  for (const [state, name] of Object.entries(cases)) assert.equal(core.errorNameForSqlstate(state), name, state);
  assert.equal(core.errorNameForSqlstate(null), 'unavailable');
});

test('sqlstateOf: database errors only, not Node system errors', () => {
  assert.equal(core.sqlstateOf({ code: '22001', severity: 'ERROR' }), '22001');
  assert.equal(core.sqlstateOf(Object.assign(new Error('x'), { code: 'EPIPE' })), null);
  assert.equal(core.sqlstateOf(Object.assign(new Error('x'), { code: 'ECONNREFUSED' })), null);
  assert.equal(core.sqlstateOf(new Error('Connection terminated unexpectedly')), null);
  const lost = core.errorResponseFor(new Error('Connection terminated'));
  assert.equal(lost.status, 503);
  assert.equal(lost.body.toString(), core.errorBody('unavailable').toString());
  const tooLong = core.errorResponseFor({ code: '22001', severity: 'ERROR', message: 'key is too long' });
  assert.equal(tooLong.body.toString(), '{"error":"invalid_request","message":"key is too long"}');
});

test('the claim statement: the fingerprint expression of each mode, nothing left to fill', () => {
  const body = core.claimSql(null);
  assert.ok(body.includes(contract.sql.fingerprint_body));
  assert.ok(!body.includes('{fingerprint}'));
  assert.ok(!body.includes('$11'));
  const fields = core.claimSql(['amount']);
  assert.ok(fields.includes(contract.sql.fingerprint_fields));
  assert.ok(fields.includes('$11::pg_catalog.text[]'));
  // the contract's text, nothing re-typed
  assert.equal(body, contract.sql.claim.replace('{fingerprint}', contract.sql.fingerprint_body));
});

test('route templates', () => {
  assert.equal(core.routeTemplate('/orders/:id'), '/orders/{id}');
  assert.equal(core.routeTemplate('/a/:x/b/:y_z'), '/a/{x}/b/{y_z}');
  assert.equal(core.routeTemplate('/payments'), '/payments');
});
