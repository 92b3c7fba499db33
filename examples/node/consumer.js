// A message consumer with exactly-once effects: the inbox pattern in one statement.
//
//   node consumer.js
//
// A broker delivers every message at least once: here a simulated queue delivers each order
// message two or three times, some of them while the first delivery is still being processed
// (by another consumer), and some deliveries fail half-way (the consumer's transaction rolls
// back, as on a crash) and are redelivered. Each consumer does, per message:
//
//   BEGIN;
//   SELECT idem_consume(tenant, message_id);   -- true: new, process it now; false: done before
//   INSERT INTO orders ...;                    -- only when new
//   COMMIT;                                    -- then acknowledge the message
//
// and a batch consumer does the same for up to 50 messages in one statement with
// idem_consume_many. Then it checks in the database that every message had exactly one effect.
// Connects through the libpq variables (PGHOST, PGPORT, ...). Prints one line per check and
// ends with "N passed, N failed"; exits 1 if any failed.

import { randomUUID } from 'node:crypto';
import pg from 'pg';

const TENANT = `orders-${randomUUID().slice(0, 8)}`;
const MESSAGES = 200;
const results = [];

function check(name, ok, detail = '') {
  results.push(Boolean(ok));
  console.log(ok ? `ok   ${name}` : `FAIL ${name}: ${JSON.stringify(detail)}`);
}

// a small deterministic random source per consumer
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

const setup = new pg.Client();
await setup.connect();
await setup.query(
  'CREATE TABLE IF NOT EXISTS orders_from_messages (tenant text, message_id text, amount bigint, consumer text)',
);

// the broker: every message two or three times, shuffled, so that duplicates meet in flight
const messages = Array.from({ length: MESSAGES }, (_, n) => [`msg-${n}`, 100 + n]);
const shuffle = rng(7);
const deliveries = [...messages, ...messages, ...messages.filter((_, n) => n % 2 === 0)]
  .map((m) => [shuffle(), m])
  .sort((a, b) => a[0] - b[0])
  .map(([, m]) => m);
const amountOf = new Map(messages);
let redelivered = 0;

class Crash extends Error {}

async function inTransaction(db, work) {
  await db.query('BEGIN');
  try {
    const value = await work();
    await db.query('COMMIT');
    return value;
  } catch (e) {
    await db.query('ROLLBACK');
    throw e;
  }
}

async function consumer(name, seed) {
  const random = rng(seed);
  const db = new pg.Client();
  await db.connect();
  for (let message = deliveries.shift(); message; message = deliveries.shift()) {
    const [id, amount] = message;
    try {
      await inTransaction(db, async () => {
        const { rows } = await db.query('SELECT idem_consume($1, $2) AS new', [TENANT, id]);
        if (rows[0].new) {
          await db.query('INSERT INTO orders_from_messages VALUES ($1, $2, $3, $4)', [TENANT, id, amount, name]);
        }
        // hold the transaction a moment, so that a duplicate meets it in flight
        await new Promise((resolve) => setTimeout(resolve, random() * 3));
        if (random() < 0.1) throw new Crash('the consumer crashed before it could commit');
      });
    } catch (e) {
      if (!(e instanceof Crash)) throw e;
      redelivered += 1; // rolled back: the record went with it, the message comes again
      deliveries.push(message);
    }
  }
  await db.end();
}

async function batchConsumer(seed) {
  const random = rng(seed);
  const db = new pg.Client();
  await db.connect();
  for (let batch = deliveries.splice(0, 50); batch.length; batch = deliveries.splice(0, 50)) {
    try {
      await inTransaction(db, async () => {
        const { rows } = await db.query('SELECT k FROM idem_consume_many($1, $2) AS k', [TENANT, batch.map(([id]) => id)]);
        for (const { k } of rows) {
          await db.query("INSERT INTO orders_from_messages VALUES ($1, $2, $3, 'batch')", [TENANT, k, amountOf.get(k)]);
        }
        if (random() < 0.1) throw new Crash('the batch consumer crashed before it could commit');
      });
    } catch (e) {
      if (!(e instanceof Crash)) throw e;
      redelivered += batch.length;
      deliveries.push(...batch);
    }
  }
  await db.end();
}

await Promise.all([consumer('c0', 1), consumer('c1', 2), consumer('c2', 3), consumer('c3', 4), batchConsumer(99)]);

const effects = await setup.query(
  'SELECT message_id, count(*)::int AS n FROM orders_from_messages WHERE tenant = $1 GROUP BY message_id',
  [TENANT],
);
const total = await setup.query(
  'SELECT coalesce(sum(amount), 0)::bigint AS total FROM orders_from_messages WHERE tenant = $1',
  [TENANT],
);
const again = await setup.query("SELECT idem_consume($1, 'msg-0') AS new", [TENANT]);
await setup.end();

check('every message had an effect', effects.rows.length === MESSAGES, effects.rows.length);
check('no message had two', effects.rows.every((r) => r.n === 1), effects.rows.filter((r) => r.n !== 1));
check('the amounts add up once', Number(total.rows[0].total) === messages.reduce((s, [, a]) => s + a, 0), total.rows[0]);
check('crashed deliveries were redelivered and still counted once', redelivered > 0, 'no delivery crashed; rerun');
check('a late redelivery is a duplicate', again.rows[0].new === false, again.rows[0]);

const failed = results.filter((ok) => !ok).length;
console.log(`${results.length - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
