"""The benchmark scenarios (bench/scenarios/*.sql) in the order they run and are reported."""

# (name, clients) pairs are built from these; `contended` always runs at --contended-clients.
SCENARIOS = ["bare", "handrolled", "plpgsql", "pg_idem", "replay", "lease",
             "inbox", "consume", "inbox_batch", "consume_batch", "contended"]
DESCRIPTIONS = {
    "bare": "business INSERT alone, in a transaction (the floor)",
    "handrolled": "INSERT .. ON CONFLICT DO NOTHING into handrolled_keys + business INSERT + UPDATE storing the response",
    "plpgsql": "the same contract in PL/pgSQL (bench/scenarios/schema.sql: try-lock, select, insert or take over, fenced update) + business INSERT",
    "pg_idem": "idem_claim + business INSERT + idem_complete, one transaction, fresh keys",
    "replay": "idem_claim on keys already completed (duplicate path), one statement",
    "lease": "lease mode: claim + commit, then business INSERT + idem_complete in a second transaction",
    "inbox": "hand-written inbox, 1 message/txn: INSERT .. ON CONFLICT DO NOTHING RETURNING into processed_messages + business INSERT",
    "consume": "idem_consume, 1 message/txn + business INSERT (same keys and round trips as inbox)",
    "inbox_batch": "hand-written inbox, 100 messages/txn in one statement: INSERT .. SELECT unnest(ids) ON CONFLICT DO NOTHING RETURNING feeding the business INSERT (CTE)",
    "consume_batch": "idem_consume_many, 100 messages/txn in one statement: its new keys feeding the business INSERT (CTE), same ids as inbox_batch",
    "contended": "half the requests repeat a key in flight or done; only 'claimed' inserts and completes",
}
