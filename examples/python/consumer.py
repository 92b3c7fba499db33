"""A message consumer with exactly-once effects: the inbox pattern in one statement.

    python consumer.py

A broker delivers every message at least once: here a simulated queue delivers each order
message two or three times, some of them while the first delivery is still being processed
(by another consumer thread), and some deliveries fail half-way (the consumer's transaction
rolls back, as on a crash) and are redelivered. Each consumer does, per message:

    BEGIN;
    SELECT idem_consume(tenant, message_id);   -- true: new, process it now; false: done before
    INSERT INTO orders ...;                    -- only when new
    COMMIT;                                    -- then acknowledge the message

and a batch consumer does the same for up to 50 messages in one statement with
idem_consume_many. Then it checks in the database that every message had exactly one effect.
Connects through the libpq variables (PGHOST, PGPORT, ...). Prints one line per check and ends
with "N passed, N failed"; exits 1 if any failed.
"""

import queue
import random
import sys
import threading
import uuid

import psycopg

RUN = uuid.uuid4().hex[:8]
TENANT = f"orders-{RUN}"
MESSAGES = 200
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + ("" if ok else f": {detail}"))


def connect():
    # prepare_threshold=None: no server-side prepared statements, so that it also works behind a
    # transaction pooler (PgBouncer before 1.21; examples/run.sh --pooler)
    return psycopg.connect(autocommit=True, prepare_threshold=None)


with connect() as db:
    db.execute(
        "CREATE TABLE IF NOT EXISTS orders_from_messages "
        "(tenant text, message_id text, amount bigint, consumer text)"
    )

# the broker: every message two or three times, shuffled, so that duplicates meet in flight
messages = [(f"msg-{n}", 100 + n) for n in range(MESSAGES)]
deliveries = queue.Queue()
redelivered = []
for message in random.sample(messages * 2 + random.sample(messages, MESSAGES // 2), MESSAGES * 5 // 2):
    deliveries.put(message)


def consume_one(db, name, message_id, amount, rng):
    """One delivery: True once processed or known as done (acknowledge), False to redeliver."""
    try:
        with db.transaction():
            new = db.execute("SELECT idem_consume(%s, %s)", (TENANT, message_id)).fetchone()[0]
            if new:
                db.execute(
                    "INSERT INTO orders_from_messages VALUES (%s, %s, %s, %s)",
                    (TENANT, message_id, amount, name),
                )
            if rng.random() < 0.1:
                raise RuntimeError("the consumer crashed before it could commit")
        return True
    except RuntimeError:
        return False  # rolled back: the record went with it, the message comes again


def consumer(name, seed):
    rng = random.Random(seed)
    with connect() as db:
        while True:
            try:
                message_id, amount = deliveries.get_nowait()
            except queue.Empty:
                return
            if not consume_one(db, name, message_id, amount, rng):
                redelivered.append(message_id)
                deliveries.put((message_id, amount))


def batch_consumer(seed):
    """Takes up to 50 deliveries at a time and records them in one statement."""
    rng = random.Random(seed)
    by_id = dict(messages)
    with connect() as db:
        while True:
            batch = []
            while len(batch) < 50:
                try:
                    batch.append(deliveries.get_nowait())
                except queue.Empty:
                    break
            if not batch:
                return
            try:
                with db.transaction():
                    new = [r[0] for r in db.execute(
                        "SELECT k FROM idem_consume_many(%s, %s) AS k",
                        (TENANT, [m for m, _ in batch]),
                    )]
                    for message_id in new:
                        db.execute(
                            "INSERT INTO orders_from_messages VALUES (%s, %s, %s, 'batch')",
                            (TENANT, message_id, by_id[message_id]),
                        )
                    if rng.random() < 0.1:
                        raise RuntimeError("the batch consumer crashed before it could commit")
            except RuntimeError:
                redelivered.extend(m for m, _ in batch)
                for message in batch:
                    deliveries.put(message)


threads = [threading.Thread(target=consumer, args=(f"c{i}", i)) for i in range(4)]
threads.append(threading.Thread(target=batch_consumer, args=(99,)))
for t in threads:
    t.start()
for t in threads:
    t.join()

with connect() as db:
    effects = dict(db.execute(
        "SELECT message_id, count(*) FROM orders_from_messages WHERE tenant = %s GROUP BY message_id",
        (TENANT,),
    ).fetchall())
    total = db.execute(
        "SELECT coalesce(sum(amount), 0) FROM orders_from_messages WHERE tenant = %s", (TENANT,)
    ).fetchone()[0]
    again = db.execute("SELECT idem_consume(%s, 'msg-0')", (TENANT,)).fetchone()[0]

check("every message had an effect", len(effects) == MESSAGES, f"{len(effects)} of {MESSAGES}")
check("no message had two", all(n == 1 for n in effects.values()),
      {m: n for m, n in effects.items() if n != 1})
check("the amounts add up once", total == sum(a for _, a in messages), total)
check("crashed deliveries were redelivered and still counted once", len(redelivered) > 0,
      "no delivery crashed; rerun")
check("a late redelivery is a duplicate", again is False, again)

failed = results.count(False)
print(f"{len(results) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
