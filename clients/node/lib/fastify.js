'use strict';
// Fastify 5 glue: a plugin that adds hooks to every route whose config has `idempotency`:
//   preParsing keeps the body's bytes (the fingerprint), preHandler claims (a replay or an error
//   is sent from there, so the handler never runs), onError marks the exception, onSend settles
//   (complete + COMMIT) before the payload leaves, onResponse cleans up what nothing settled.
const { Readable } = require('node:stream');
const engine = require('./engine');
const core = require('./core');

const kAttempt = Symbol('pg-idem-http.attempt');
const kException = Symbol('pg-idem-http.exception');

/**
 *   await app.register(pgIdemHttp, { pool })
 *   app.post('/payments', { config: { idempotency: { lease: null } } }, async (request, reply) => ...)
 * Plugin options are the defaults of every route; `config.idempotency` (an object or true)
 * overrides them per route.
 */
function pgIdemHttp(fastify, shared, done) {
  // refuse to start (app.ready(), app.listen() reject) when pg_idem is missing or too old
  if (shared && shared.pool) fastify.addHook('onReady', () => engine.locate(shared.pool, { schema: shared.schema ?? null }).then(() => {}));
  fastify.decorateRequest('idem', null);
  fastify.decorateRequest('rawBody', null);
  fastify.addHook('onRoute', (route) => {
    const own = route.config && route.config.idempotency;
    if (!own) return;
    const cfg = engine.resolveOptions({ ...shared, ...(own === true ? {} : own) });
    const template = cfg.route || core.routeTemplate(route.url);
    // ours run after the route's own hooks of the same kind (e.g. the app's auth preHandler)
    route.preParsing = [...list(route.preParsing), keepRawBody(cfg)];
    route.preHandler = [...list(route.preHandler), claim(cfg, template)];
    route.onError = [...list(route.onError), markException];
    route.onSend = [...list(route.onSend), settle];
    route.onResponse = [...list(route.onResponse), cleanUp];
  });
  done();
}
// applies to the routes of the context that registers it, as fastify-plugin would
pgIdemHttp[Symbol.for('skip-override')] = true;
pgIdemHttp[Symbol.for('fastify.display-name')] = 'pg-idem-http';

const list = (hooks) => (hooks === undefined || hooks === null ? [] : Array.isArray(hooks) ? hooks : [hooks]);

function keepRawBody(cfg) {
  return async function pgIdemRawBody(request, reply, payload) {
    const chunks = [];
    let size = 0;
    for await (const chunk of payload) {
      size += chunk.length;
      if (size > cfg.limit) {
        // the contract's 413, not Fastify's error shape; the rest of the body is not read
        const r = engine.reject('payload_too_large', { method: request.method, route: cfg.route || core.routeTemplate(request.routeOptions.url) }).response;
        sendResponse(reply, r);
        return reply;
      }
      chunks.push(chunk);
    }
    request.rawBody = Buffer.concat(chunks);
    // the content-type parser reads the same bytes again
    const copy = Readable.from(request.rawBody.length ? [request.rawBody] : []);
    copy.receivedEncodedLength = request.rawBody.length;
    return copy;
  };
}

function claim(cfg, template) {
  return async function pgIdemClaim(request, reply) {
    const tenant = await cfg.tenant(request); // what the hook throws is the answer
    const { response, attempt } = await engine.start(cfg, {
      method: request.method,
      route: template,
      target: request.raw.url, // as received, not decoded
      keyHeader: request.headers[cfg.keyHeader.toLowerCase()],
      tenant,
      body: request.rawBody || Buffer.alloc(0),
    });
    if (response) return sendResponse(reply, response);
    request[kAttempt] = attempt;
    request.idem = attempt.ctx;
  };
}

async function markException(request, reply, error) {
  request[kException] = error;
}

async function settle(request, reply, payload) {
  const attempt = request[kAttempt];
  if (!attempt || attempt.settled) return payload;
  const body = await collect(payload);
  const captured = { status: reply.statusCode, headers: Object.entries(reply.getHeaders()), body };
  const out = await attempt.settle(captured, request[kException] || null);
  if (out === captured) return body;
  // an error response of the contract instead of the handler's
  for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
  reply.code(out.status);
  setHeaders(reply, out.headers);
  return out.body;
}

// a name given more than once: one header line per value, in order
function setHeaders(reply, pairs) {
  for (const [name, values] of core.groupHeaders(pairs)) reply.header(name, values.length === 1 ? values[0] : values);
}

function sendResponse(reply, response) {
  reply.code(response.status);
  setHeaders(reply, response.headers);
  return reply.send(response.body.length ? response.body : undefined);
}

async function cleanUp(request) {
  const attempt = request[kAttempt];
  if (attempt && !attempt.settled) await attempt.abandon();
}

async function collect(payload) {
  if (payload === undefined || payload === null) return Buffer.alloc(0);
  if (typeof payload === 'string' || Buffer.isBuffer(payload)) return core.toBuffer(payload);
  if (typeof payload.pipe === 'function' || typeof payload[Symbol.asyncIterator] === 'function') {
    const chunks = [];
    for await (const chunk of payload) chunks.push(core.toBuffer(chunk));
    return Buffer.concat(chunks);
  }
  return core.toBuffer(payload);
}

module.exports = { pgIdemHttp };
