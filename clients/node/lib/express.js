'use strict';
// Express 5 glue: a route middleware that claims the key, holds back everything the handler
// writes, and lets it out only after the attempt is settled (COMMIT for a stored response).
const core = require('./core');
const engine = require('./engine');

const kException = Symbol('pg-idem-http.exception');

/**
 * idempotency({ pool, tenant, ...route options }) -> Express middleware, for one route:
 *   app.post('/payments', idempotency({ pool, tenant: (req) => req.user.account }), handler)
 * Express has no start hook: await locate(pool) before app.listen() to refuse to start when
 * pg_idem is missing or too old (else the first request finds out, and answers 500).
 */
function idempotency(options) {
  const cfg = engine.resolveOptions(options);
  return async function pgIdemHttp(req, res, next) {
    const route = cfg.route || (req.route ? core.routeTemplate(req.baseUrl + req.route.path) : req.baseUrl + req.path);
    let body;
    try {
      body = await readRawBody(req, cfg.limit);
    } catch (err) {
      if (err.status === 413) return send(res, engine.reject('payload_too_large', { method: req.method, route }).response);
      return next(err);
    }
    const parsed = parseBody(req, body);
    let tenant;
    try {
      tenant = await cfg.tenant(req);
    } catch (err) {
      return next(err); // the hook's own answer (an auth error, say)
    }
    const { response, attempt } = await engine.start(cfg, {
      method: req.method,
      route,
      target: req.originalUrl, // as received: Express decodes nothing in it
      keyHeader: req.get(cfg.keyHeader),
      tenant,
      body,
    });
    if (response) return send(res, response);

    req.rawBody = body;
    req.body = parsed;
    req.idem = attempt.ctx;
    req.idem[kException] = null;
    // (a client that goes away changes nothing: the handler still owns the connection until it
    // answers, and the attempt settles then)
    hold(res, async (captured, release) => {
      const out = await attempt.settle(captured, req.idem[kException]);
      release();
      send(res, out, out === captured);
    });
    next();
  };
}

/**
 * Optional error middleware, mounted after the routes: marks the attempt as failed by an
 * exception, so it rolls back even when the error carries a final (4xx) status.
 */
function idempotencyErrors() {
  return function pgIdemHttpErrors(err, req, res, next) {
    if (req.idem) req.idem[kException] = err;
    next(err);
  };
}

// The fingerprint needs the body's exact bytes: taken from express.raw(), or read here.
async function readRawBody(req, limit) {
  if (Buffer.isBuffer(req.body)) return req.body;
  if (req.body !== undefined && req.body !== null && req._body) {
    throw new Error('pg-idem-http: the body was already parsed; mount express.raw() (or nothing), not express.json(), before idempotency()');
  }
  if (req.readableEnded) return Buffer.alloc(0);
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > limit) throw Object.assign(new Error('request entity too large'), { status: 413, expose: true });
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

// JSON bodies reach the handler parsed (undefined when they do not parse: the handler answers,
// and its answer is stored like any other); other bodies as the Buffer.
function parseBody(req, body) {
  if (!/\bjson\b/i.test(req.get('content-type') || '')) return body;
  try {
    return JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
}

/**
 * Buffers the response: writeHead/write/end only record; the first end() calls
 * done(captured, release), and release() gives res its own methods back to send the answer.
 */
function hold(res, done) {
  const original = { writeHead: res.writeHead, write: res.write, end: res.end };
  const chunks = [];
  const add = (chunk, encoding) => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk, typeof encoding === 'string' ? encoding : 'utf8'));
  };
  res.writeHead = function writeHead(status, reason, headers) {
    if (typeof reason !== 'string') [reason, headers] = [undefined, reason];
    res.statusCode = status;
    if (reason) res.statusMessage = reason;
    if (Array.isArray(headers)) {
      for (let i = 0; i < headers.length; i += 2) res.setHeader(headers[i], headers[i + 1]);
    } else if (headers) {
      for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
    }
    return res;
  };
  res.write = function write(chunk, encoding, cb) {
    add(chunk, encoding);
    const callback = [encoding, cb].find((f) => typeof f === 'function');
    if (callback) process.nextTick(callback);
    return true;
  };
  let ended = false;
  res.end = function end(chunk, encoding, cb) {
    if (ended) return res; // a second end() must not send anything before the COMMIT
    ended = true;
    add(chunk, encoding);
    const headers = res.getHeaderNames().map((name) => [name, res.getHeader(name)]);
    done({ status: res.statusCode, headers, body: Buffer.concat(chunks) }, () => Object.assign(res, original)).catch(
      (err) => res.destroy(err),
    );
    return res;
  };
}

/** Sends {status, headers, body}: replaces the headers when the response is not the handler's. */
function send(res, response, own = false) {
  if (res.headersSent) return;
  if (!own) {
    res.statusMessage = undefined; // Node picks the reason phrase of the new status
    for (const name of res.getHeaderNames()) res.removeHeader(name);
    // a name given more than once: one header line per value, in order
    for (const [name, values] of core.groupHeaders(response.headers)) res.setHeader(name, values.length === 1 ? values[0] : values);
  }
  res.statusCode = response.status;
  const noBody = response.status === 204 || response.status === 304 || response.status < 200;
  if (!noBody) res.setHeader('Content-Length', response.body.length);
  res.end(noBody ? undefined : response.body);
}

module.exports = { idempotency, idempotencyErrors };
