// Compiled by test.sh with `tsc --noEmit`: the README's usage, typed.
import express from 'express';
import Fastify from 'fastify';
import pg from 'pg';
import { idempotency, idempotencyErrors, pgIdemHttp, parseKey, contract, type IdemContext } from 'pg-idem-http';
import type {} from 'pg-idem-http/fastify';

const pool = new pg.Pool({ connectionString: 'postgresql://127.0.0.1/app' });

const app = express();
app.post('/payments', idempotency({ pool, tenant: (req) => req.get('X-Tenant') }), async (req, res) => {
  const idem: IdemContext | undefined = req.idem;
  const { rows } = await idem!.client!.query<{ id: string }>('INSERT INTO payments (amount) VALUES ($1) RETURNING id', [1]);
  res.status(201).json({ id: rows[0].id });
});
app.post('/payouts', idempotency({ pool, lease: '30 seconds' }), async (req, res) => {
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
  await f.register(pgIdemHttp, { pool });
  f.post('/payments', { config: { idempotency: { fields: ['amount'], ttl: '1 day' } } }, async (request, reply) => {
    const client = await request.idem!.begin();
    await client.query('SELECT 1');
    const raw: Buffer | null = request.rawBody;
    return reply.code(201).send({ bytes: raw?.length });
  });
}

const key: string | null | undefined = parseKey('"abc"');
const limit: number = contract.defaults.max_key_length;
void fastify;
void key;
void limit;
