// Compiled by test.sh with `tsc --noEmit`: the README's usage, typed.
import express from 'express';
import Fastify from 'fastify';
import pg from 'pg';
import knexFactory from 'knex';
import {
  idempotency,
  idempotencyErrors,
  pgIdemHttp,
  parseKey,
  contract,
  locate,
  locateOn,
  claim,
  complete,
  fromKnex,
  outcomeCounts,
  OUTCOME_CHANNEL,
  TransactionEndedError,
  type IdemContext,
  type OutcomeMessage,
} from 'pg-idem-http';
import diagnostics from 'node:diagnostics_channel';
import type {} from 'pg-idem-http/fastify';

const pool = new pg.Pool({ connectionString: 'postgresql://127.0.0.1/app' });

const app = express();
app.post('/payments', idempotency({ pool, tenant: (req) => req.get('X-Tenant') }), async (req, res) => {
  const idem: IdemContext | undefined = req.idem;
  const { rows } = await idem!.client!.query<{ id: string }>('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [1]);
  res.status(201).json({ id: rows[0].id });
});
app.post('/payouts', idempotency({ pool, singleTenant: 'shop', schema: 'public', lease: '30 seconds' }), async (req, res) => {
  const ref: string = await req.idem!.downstreamKey('bank');
  await req.idem!.checkpoint('sent', { ref });
  await req.idem!.heartbeat();
  const client = await req.idem!.begin();
  await client.query('SELECT 1');
  res.status(201).send(ref);
});
app.use(idempotencyErrors());

async function fastify(): Promise<void> {
  const f = Fastify();
  await f.register(pgIdemHttp, { pool, tenant: (request) => request.headers['x-tenant'] as string | undefined });
  f.post('/payments', { config: { idempotency: { fields: ['amount'], ttl: '1 day' } } }, async (request, reply) => {
    const client = await request.idem!.begin();
    await client.query('SELECT 1');
    const raw: Buffer | null = request.rawBody;
    return reply.code(201).send({ bytes: raw?.length });
  });
}

async function byo(): Promise<void> {
  const { schema } = await locate(pool);
  const knex = knexFactory({ client: 'pg' });
  const trx = await knex.transaction();
  const db = fromKnex(trx);
  await locateOn(db);
  const claimed = await claim(db, { schema, tenant: 't', method: 'POST', route: '/p', target: '/p', keyHeader: 'k', body: Buffer.alloc(0) });
  if (claimed.outcome === 'claimed') {
    await complete(db, claimed.claim, { status: 201, headers: [['content-type', 'text/plain']], body: 'ok' });
  } else {
    const status: number = claimed.response.status;
    void status;
  }
  const err: unknown = null;
  if (err instanceof TransactionEndedError) void err.response.status;
  const counts: number = outcomeCounts().transaction_ended;
  diagnostics.subscribe(OUTCOME_CHANNEL, (message) => void (message as OutcomeMessage).outcome);
  void counts;
}

const key: string | null | undefined = parseKey('"abc"');
const limit: number = contract.defaults.max_key_length;
void fastify;
void byo;
void key;
void limit;
