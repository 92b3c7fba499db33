"""The benchmark scenarios (bench/scenarios/*.sql) in the order they run and are reported."""

# (name, clients) pairs are built from these; `contended` always runs at --contended-clients.
SCENARIOS = ["bare", "handrolled", "plpgsql", "pg_idem", "replay", "lease", "contended"]
DESCRIPTIONS = {
    "bare": "business INSERT alone, in a transaction (the floor)",
    "handrolled": "INSERT .. ON CONFLICT DO NOTHING into handrolled_keys + business INSERT + UPDATE storing the response",
    "plpgsql": "the same contract in PL/pgSQL (bench/schema.sql: try-lock, select, insert or take over, fenced update) + business INSERT",
    "pg_idem": "idem_claim + business INSERT + idem_complete, one transaction, fresh keys",
    "replay": "idem_claim on keys already completed (duplicate path), one statement",
    "lease": "lease mode: claim + commit, then business INSERT + idem_complete in a second transaction",
    "contended": "half the requests repeat a key in flight or done; only 'claimed' inserts and completes",
}
